//! Names and the rules they follow: DNS-1123 labels and subdomains, environment variable
//! names, and the names of what the operator makes for an owner (R4, R8, R13).

use super::owner::OWNER_LABEL;

/// What a DNS-1123 label is, for messages.
pub(super) const LABEL_RULE: &str = "must be a DNS-1123 label: lower-case letters, digits and \
    '-', starting and ending with a letter or digit, at most 63 characters";
/// What a DNS-1123 subdomain is, for messages.
pub(super) const SUBDOMAIN_RULE: &str = "must be a DNS-1123 subdomain: lower-case letters, digits, '-' and \
    '.', starting and ending with a letter or digit, at most 253 characters";

/// Whether `s` is a DNS-1123 label: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, 1 to 63 characters.
pub(super) fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    (1..=63).contains(&b.len())
        && b.iter().all(|c| alnum(c) || *c == b'-')
        && b.first().is_some_and(alnum)
        && b.last().is_some_and(alnum)
}

/// Whether `s` is a DNS-1123 subdomain: dot-separated DNS-1123 labels, at most 253 characters.
pub(super) fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns1123_label)
}

/// Checks a variant label (R8): a DNS-1123 label, so it can be part of a Deployment name and a
/// label value.
pub fn validate_label(label: &str) -> Result<(), String> {
    if is_dns1123_label(label) {
        Ok(())
    } else {
        Err(format!("label {label:?}: {LABEL_RULE}"))
    }
}

/// Checks an object name (a Mutation's): a DNS-1123 subdomain, as Kubernetes allows for
/// custom resources, dots included.
pub fn validate_name(name: &str) -> Result<(), String> {
    if is_dns1123_subdomain(name) {
        Ok(())
    } else {
        Err(format!("name {name:?}: {SUBDOMAIN_RULE}"))
    }
}

/// The longest owner name the operator can serve: its generated objects carry it as the value
/// of label `mutantops.neiam.org/owner`, and a label value has at most 63 characters.
pub const MAX_OWNER_NAME: usize = 63;

/// Why the operator cannot serve an owner of this name (R8): longer than
/// [`MAX_OWNER_NAME`], it cannot label the Deployments and the Secret it would make.
pub fn unservable_name(kind: &str, name: &str) -> Option<String> {
    (name.chars().count() > MAX_OWNER_NAME).then(|| {
        format!(
            "{kind} name {name:?} is {} characters: at most {MAX_OWNER_NAME} can be served, as \
             the value of label {OWNER_LABEL} on what the operator makes for it",
            name.chars().count()
        )
    })
}

/// Checks the name of a Mutation to create: [`validate_name`], and servable
/// ([`unservable_name`]).
pub fn validate_mutation_name(name: &str) -> Result<(), String> {
    validate_name(name)?;
    unservable_name("Mutation", name).map_or(Ok(()), Err)
}

/// Checks an environment variable name (R8) with Kubernetes' classic rule
/// `[-._a-zA-Z][-._a-zA-Z0-9]*`.
pub fn validate_env_name(name: &str) -> Result<(), String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_');
    match name.chars().next() {
        None => Err("env name \"\": must not be empty".to_owned()),
        Some(first) if !first.is_ascii_digit() && name.chars().all(allowed) => Ok(()),
        Some(_) => Err(format!(
            "env name {name:?}: must consist of letters, digits, '_', '-' and '.', and must \
             not start with a digit"
        )),
    }
}

/// The name of a variant's Deployment: `<base>-<label>` (R4).
pub fn deployment_name(base: &str, label: &str) -> String {
    format!("{base}-{label}")
}

/// The name of a Mutation's Secret: `<name>-secret` (R13).
pub fn secret_name(mutation: &str) -> String {
    [mutation, "-secret"].concat()
}

/// The key of the token in a Mutation's Secret.
pub const TOKEN_KEY: &str = "token";
