//! The routing table of the HTTP API (R19): every route once, as method, path template, who
//! may call it, what it does and its summary. Routing, the `Allow` header of a 405, the
//! admin check and the OpenAPI document (docs/api.yaml, checked by tests/openapi.rs) all read
//! this one table.

use hyper::Method;

/// Who may call a route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Only the admin token (`MUTANT_API_TOKEN`).
    Admin,
    /// The admin, or the token of the Mutation named in the path; a device's token for its
    /// own variant (R39).
    MutationToken,
    /// The admin, or the Mutation's token as an enrollment key (`spec.devices`, R39).
    Enroll,
    /// The admin, or the token of the device named in the path.
    Device,
    /// Only the token of the device named in the path: its heartbeat.
    DeviceOnly,
}

/// What a route does: one handler each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// `mutations::list`.
    ListMutations,
    /// `mutations::create`.
    CreateMutation,
    /// `mutations::get`.
    GetMutation,
    /// `mutations::delete`.
    DeleteMutation,
    /// `variants::list`.
    ListVariants,
    /// `variants::add`.
    AddVariant,
    /// `variants::get`.
    GetVariant,
    /// `variants::scale`.
    ScaleVariant,
    /// `variants::remove`.
    RemoveVariant,
    /// `devices::enroll`.
    EnrollDevice,
    /// `devices::list`.
    ListDevices,
    /// `devices::get`.
    GetDevice,
    /// `devices::remove`.
    RemoveDevice,
    /// `devices::rotate`.
    RotateToken,
    /// `devices::poll`.
    Poll,
    /// `screens::of_device`.
    DeviceScreen,
    /// `screens::of_variant`.
    VariantScreen,
    /// `rollout::resume`.
    ResumeRollout,
    /// `rollout::abort`.
    AbortRollout,
}

/// One route of the table.
#[derive(Debug, PartialEq, Eq)]
pub struct Route {
    /// The HTTP method.
    pub method: Method,
    /// The path, with `{ns}`, `{name}`, `{label}` and `{id}` for its parameters.
    pub path: &'static str,
    /// Which of the paths it is (a test checks it against `path`).
    pub shape: Shape,
    /// Who may call it.
    pub access: Access,
    /// What it does.
    pub action: Action,
    /// One line for the OpenAPI document.
    pub summary: &'static str,
}

/// The paths of the API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// `/api/v1/namespaces/{ns}/mutations`.
    Mutations,
    /// `/api/v1/namespaces/{ns}/mutations/{name}`.
    Mutation,
    /// `/api/v1/namespaces/{ns}/mutations/{name}/variants`.
    Variants,
    /// `/api/v1/namespaces/{ns}/mutations/{name}/variants/{label}`.
    Variant,
    /// `/api/v1/namespaces/{ns}/mutations/{name}/devices`.
    Devices,
    /// `/api/v1/namespaces/{ns}/mutations/{name}/devices/{id}`.
    Device,
    /// `/api/v1/namespaces/{ns}/mutations/{name}/devices/{id}/token`.
    DeviceToken,
    /// `/api/v1/namespaces/{ns}/mutations/{name}/devices/{id}/poll`.
    DevicePoll,
    /// `/api/v1/namespaces/{ns}/mutations/{name}/devices/{id}/screen`.
    DeviceScreen,
    /// `/api/v1/namespaces/{ns}/mutations/{name}/variants/{label}/screen`.
    VariantScreen,
    /// `/api/v1/namespaces/{ns}/mutations/{name}/rollout/resume`.
    RolloutResume,
    /// `/api/v1/namespaces/{ns}/mutations/{name}/rollout/abort`.
    RolloutAbort,
}

const MUTATIONS: (&str, Shape) = ("/api/v1/namespaces/{ns}/mutations", Shape::Mutations);
const MUTATION: (&str, Shape) = ("/api/v1/namespaces/{ns}/mutations/{name}", Shape::Mutation);
const VARIANTS: (&str, Shape) = (
    "/api/v1/namespaces/{ns}/mutations/{name}/variants",
    Shape::Variants,
);
const VARIANT: (&str, Shape) = (
    "/api/v1/namespaces/{ns}/mutations/{name}/variants/{label}",
    Shape::Variant,
);

const DEVICES: (&str, Shape) = (
    "/api/v1/namespaces/{ns}/mutations/{name}/devices",
    Shape::Devices,
);
const DEVICE: (&str, Shape) = (
    "/api/v1/namespaces/{ns}/mutations/{name}/devices/{id}",
    Shape::Device,
);
const DEVICE_TOKEN: (&str, Shape) = (
    "/api/v1/namespaces/{ns}/mutations/{name}/devices/{id}/token",
    Shape::DeviceToken,
);
const DEVICE_POLL: (&str, Shape) = (
    "/api/v1/namespaces/{ns}/mutations/{name}/devices/{id}/poll",
    Shape::DevicePoll,
);
const DEVICE_SCREEN: (&str, Shape) = (
    "/api/v1/namespaces/{ns}/mutations/{name}/devices/{id}/screen",
    Shape::DeviceScreen,
);
const VARIANT_SCREEN: (&str, Shape) = (
    "/api/v1/namespaces/{ns}/mutations/{name}/variants/{label}/screen",
    Shape::VariantScreen,
);

const ROLLOUT_RESUME: (&str, Shape) = (
    "/api/v1/namespaces/{ns}/mutations/{name}/rollout/resume",
    Shape::RolloutResume,
);
const ROLLOUT_ABORT: (&str, Shape) = (
    "/api/v1/namespaces/{ns}/mutations/{name}/rollout/abort",
    Shape::RolloutAbort,
);

const fn route(
    method: Method,
    (path, shape): (&'static str, Shape),
    access: Access,
    action: Action,
    summary: &'static str,
) -> Route {
    Route {
        method,
        path,
        shape,
        access,
        action,
        summary,
    }
}

/// Every route.
pub static ROUTES: &[Route] = &[
    route(
        Method::GET,
        MUTATIONS,
        Access::Admin,
        Action::ListMutations,
        "list the Mutations of a namespace (admin)",
    ),
    route(
        Method::POST,
        MUTATIONS,
        Access::Admin,
        Action::CreateMutation,
        "create a Mutation (admin)",
    ),
    route(
        Method::GET,
        MUTATION,
        Access::MutationToken,
        Action::GetMutation,
        "get a Mutation",
    ),
    route(
        Method::DELETE,
        MUTATION,
        Access::Admin,
        Action::DeleteMutation,
        "delete a Mutation (admin)",
    ),
    route(
        Method::GET,
        VARIANTS,
        Access::MutationToken,
        Action::ListVariants,
        "list its variants",
    ),
    route(
        Method::POST,
        VARIANTS,
        Access::MutationToken,
        Action::AddVariant,
        "add a variant",
    ),
    route(
        Method::GET,
        VARIANT,
        Access::MutationToken,
        Action::GetVariant,
        "get a variant",
    ),
    route(
        Method::PATCH,
        VARIANT,
        Access::MutationToken,
        Action::ScaleVariant,
        "scale a variant",
    ),
    route(
        Method::DELETE,
        VARIANT,
        Access::MutationToken,
        Action::RemoveVariant,
        "remove a variant",
    ),
    route(
        Method::POST,
        DEVICES,
        Access::Enroll,
        Action::EnrollDevice,
        "enroll a device",
    ),
    route(
        Method::GET,
        DEVICES,
        Access::Admin,
        Action::ListDevices,
        "list its devices (admin)",
    ),
    route(
        Method::GET,
        DEVICE,
        Access::Device,
        Action::GetDevice,
        "get a device",
    ),
    route(
        Method::DELETE,
        DEVICE,
        Access::Device,
        Action::RemoveDevice,
        "remove a device",
    ),
    route(
        Method::POST,
        DEVICE_TOKEN,
        Access::Device,
        Action::RotateToken,
        "give a device a new token",
    ),
    route(
        Method::GET,
        DEVICE_POLL,
        Access::DeviceOnly,
        Action::Poll,
        "a device's heartbeat",
    ),
    route(
        Method::GET,
        DEVICE_SCREEN,
        Access::Device,
        Action::DeviceScreen,
        "the screen of a device's variant (ETag; 304 when unchanged)",
    ),
    route(
        Method::GET,
        VARIANT_SCREEN,
        Access::MutationToken,
        Action::VariantScreen,
        "the screen of a variant (ETag; 304 when unchanged)",
    ),
    route(
        Method::POST,
        ROLLOUT_RESUME,
        Access::Admin,
        Action::ResumeRollout,
        "resume its rollout at a pause or a failed step (admin)",
    ),
    route(
        Method::POST,
        ROLLOUT_ABORT,
        Access::Admin,
        Action::AbortRollout,
        "abort its rollout, every variant back on the previous base (admin)",
    ),
];

/// The parameters of a routed path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Params<'a> {
    /// `{ns}`.
    pub ns: &'a str,
    /// `{name}`, in the routes below a Mutation.
    pub name: Option<&'a str>,
    /// `{label}`, in the routes of one variant.
    pub label: Option<&'a str>,
    /// `{id}`, in the routes of one device.
    pub id: Option<&'a str>,
}

/// What the table says of a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Resolved<'a> {
    /// No route has this path: 404.
    NotFound,
    /// Routes have this path, not with this method: 405 with these methods.
    MethodNotAllowed(Vec<Method>),
    /// This route, with these parameters.
    Found(&'static Route, Params<'a>),
}

/// Finds the route of `method` and `path`: the path is read once, then only the routes of
/// its shape are looked at.
pub fn resolve<'a>(method: &Method, path: &'a str) -> Resolved<'a> {
    let Some((shape, params)) = shape_of(path) else {
        return Resolved::NotFound;
    };
    let mut allowed = Vec::new();
    for route in ROUTES.iter().filter(|r| r.shape == shape) {
        if route.method == *method {
            return Resolved::Found(route, params);
        }
        allowed.push(route.method.clone());
    }
    Resolved::MethodNotAllowed(allowed)
}

/// Which of the paths `path` is, with its parameters (none of them empty).
fn shape_of(path: &str) -> Option<(Shape, Params<'_>)> {
    let rest = path.strip_prefix("/api/v1/namespaces/")?;
    let mut segments = [""; 6];
    let mut count = 0;
    for segment in rest.split('/') {
        if segment.is_empty() || count == segments.len() {
            return None;
        }
        segments[count] = segment;
        count += 1;
    }
    let p = |ns, name, label| Params {
        ns,
        name,
        label,
        id: None,
    };
    let d = |ns, name, id| Params {
        ns,
        name: Some(name),
        label: None,
        id: Some(id),
    };
    match &segments[..count] {
        [ns, "mutations"] => Some((Shape::Mutations, p(ns, None, None))),
        [ns, "mutations", name] => Some((Shape::Mutation, p(ns, Some(*name), None))),
        [ns, "mutations", name, "variants"] => Some((Shape::Variants, p(ns, Some(*name), None))),
        [ns, "mutations", name, "variants", label] => {
            Some((Shape::Variant, p(ns, Some(*name), Some(*label))))
        }
        [ns, "mutations", name, "devices"] => Some((Shape::Devices, p(ns, Some(*name), None))),
        [ns, "mutations", name, "devices", id] => Some((Shape::Device, d(ns, name, id))),
        [ns, "mutations", name, "devices", id, "token"] => {
            Some((Shape::DeviceToken, d(ns, name, id)))
        }
        [ns, "mutations", name, "devices", id, "poll"] => {
            Some((Shape::DevicePoll, d(ns, name, id)))
        }
        [ns, "mutations", name, "devices", id, "screen"] => {
            Some((Shape::DeviceScreen, d(ns, name, id)))
        }
        [ns, "mutations", name, "variants", label, "screen"] => {
            Some((Shape::VariantScreen, p(ns, Some(*name), Some(*label))))
        }
        [ns, "mutations", name, "rollout", "resume"] => {
            Some((Shape::RolloutResume, p(ns, Some(*name), None)))
        }
        [ns, "mutations", name, "rollout", "abort"] => {
            Some((Shape::RolloutAbort, p(ns, Some(*name), None)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests;
