//! The end state: every difference between the cluster and the final specs.

use super::*;

// --- the end state ------------------------------------------------------------------------------

/// What differs from the final specs, in two parts: the objects the operator writes
/// (Deployments, Secrets; R4–R6, R9, R14) and the statuses it reports (R11), which also wait
/// for the Deployment controller and the pods.
#[derive(Default)]
pub(crate) struct Differences {
    pub(crate) objects: Vec<String>,
    pub(crate) statuses: Vec<String>,
    /// How many variants each status reports in each state.
    pub(crate) states: BTreeMap<&'static str, usize>,
}

/// Everything about the cluster that differs from the final specs; empty when it has
/// converged.
pub(crate) async fn differences(
    ctx: &Ctx,
    owners: &[Arc<OwnerInfo>],
    finals: &BTreeMap<String, Vec<Variant>>,
    foreign: &[Foreign],
) -> Differences {
    let mut problems = Vec::new();
    let mut statuses = Vec::new();
    let mut states = BTreeMap::new();
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ctx.ns);
    let list = match tokio::time::timeout(
        Duration::from_secs(20),
        deployments.list(&ListParams::default()),
    )
    .await
    {
        Ok(Ok(list)) => list.items,
        Ok(Err(e)) => {
            problems.push(format!("listing Deployments: {e}"));
            return Differences {
                objects: problems,
                statuses,
                states: BTreeMap::new(),
            };
        }
        Err(_) => {
            problems.push("listing Deployments: no answer".to_string());
            return Differences {
                objects: problems,
                statuses,
                states: BTreeMap::new(),
            };
        }
    };
    let mut by_name: BTreeMap<String, &Deployment> =
        list.iter().map(|d| (d.name_any(), d)).collect();

    for f in foreign {
        let Some(d) = by_name.remove(&f.name) else {
            problems.push(format!("foreign Deployment {} is gone", f.name));
            continue;
        };
        let managers: Vec<&str> = d
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .filter_map(|m| m.manager.as_deref())
            .collect();
        if d.metadata.uid.as_deref() != Some(f.uid.as_str())
            || d.metadata.generation != f.generation
            || d.labels() != &f.labels
            || !d.owner_references().is_empty()
            || d.metadata.deletion_timestamp.is_some()
            || managers.contains(&variant::FIELD_MANAGER)
        {
            problems.push(format!(
                "foreign Deployment {} was touched: uid {:?} generation {:?} labels {:?} \
                 ownerReferences {:?} managers {managers:?} (created as {f:?})",
                f.name,
                d.metadata.uid,
                d.metadata.generation,
                d.labels(),
                d.owner_references()
            ));
        }
    }

    for owner in owners {
        let declared = &finals[&owner.name];
        for v in declared.iter().filter(|v| v.label != TAKEN) {
            let name = variant::deployment_name(&owner.base, &v.label);
            match by_name.remove(&name) {
                None => problems.push(format!(
                    "{:?} {}: variant {:?} has no Deployment {name}",
                    owner.kind, owner.name, v.label
                )),
                Some(d) => problems.extend(deployment_differences(ctx, owner, v, d)),
            }
        }
        statuses.extend(status_differences(ctx, owner, declared, &list, &mut states).await);
        if let Some(record) = &owner.secret {
            problems.extend(secret_differences(ctx, owner, record).await);
        }
    }
    for (name, d) in by_name {
        problems.push(format!(
            "Deployment {name} is declared by no spec (orphan or duplicate): labels {:?} \
             ownerReferences {:?}",
            d.labels(),
            d.owner_references()
        ));
    }
    Differences {
        objects: problems,
        statuses,
        states,
    }
}

/// How Deployment `d` differs from variant `v` of `owner` as R4 and the operator build it.
pub(crate) fn deployment_differences(
    ctx: &Ctx,
    owner: &OwnerInfo,
    v: &Variant,
    d: &Deployment,
) -> Vec<String> {
    let mut problems = Vec::new();
    let name = d.name_any();
    let mut problem = |what: String| problems.push(format!("Deployment {name}: {what}"));
    let ours = BTreeMap::from([
        (variant::OWNER_LABEL.to_string(), owner.name.clone()),
        (variant::VARIANT_LABEL.to_string(), v.label.clone()),
        (
            variant::KIND_LABEL.to_string(),
            owner.kind.owner_kind().label_value().to_string(),
        ),
    ]);
    let with = |extra: (&str, &str)| {
        let mut labels = ours.clone();
        labels.insert(extra.0.to_string(), extra.1.to_string());
        labels
    };
    if d.metadata.deletion_timestamp.is_some() {
        problem("is being deleted".to_string());
    }
    if d.labels() != &with(("team", "edge")) {
        problem(format!("labels {:?}", d.labels()));
    }
    let refs = d.owner_references();
    let good_ref = refs.len() == 1
        && refs[0].api_version == "neiam.org/v1"
        && refs[0].kind == owner.kind.owner_kind().kind()
        && refs[0].name == owner.name
        && refs[0].uid == owner.uid
        && refs[0].controller == Some(true)
        && refs[0].block_owner_deletion == Some(true);
    if !good_ref {
        problem(format!("ownerReferences {refs:?}"));
    }
    let Some(spec) = d.spec.as_ref() else {
        problem("no spec".to_string());
        return problems;
    };
    if spec.replicas != Some(v.instances) {
        problem(format!(
            "replicas {:?}, declared {}",
            spec.replicas, v.instances
        ));
    }
    let selector = spec.selector.match_labels.clone().unwrap_or_default();
    if selector != with(("app", &owner.base)) {
        problem(format!("selector {selector:?}"));
    }
    let template_labels = spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    if template_labels != with(("app", &owner.base)) {
        problem(format!("pod template labels {template_labels:?}"));
    }
    let containers = spec
        .template
        .spec
        .as_ref()
        .map(|p| p.containers.clone())
        .unwrap_or_default();
    if containers.len() != 1 {
        problem(format!("{} containers", containers.len()));
    } else {
        let env: Vec<(String, String)> = containers[0]
            .env
            .iter()
            .flatten()
            .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
            .collect();
        if env != expected_env(&v.env.to_map()) {
            problem(format!(
                "env {env:?}, expected {:?}",
                expected_env(&v.env.to_map())
            ));
        }
    }
    // Everything else (annotations, the desired-state hash) as the operator builds it.
    let base = Base::parse(&base(&owner.base)).unwrap();
    let desired = variant::build(&base, &owner.owner(&ctx.ns), v);
    let observed = serde_json::to_value(d)
        .and_then(serde_json::from_value::<variant::ObservedDeployment>)
        .unwrap();
    if variant::needs_apply(&desired, Some(&observed)) {
        problem("differs from what the operator builds for its variant".to_string());
    }
    problems
}

/// The state and ready replicas R11 gives a variant of `instances` whose Deployment is
/// `current`: Ready once the Deployment has observed its latest generation and its replicas,
/// updated and ready replicas all equal `instances`, else Progressing.
pub(crate) fn r11_state(instances: i32, current: Option<&Deployment>) -> (VariantState, i32) {
    let Some(d) = current else {
        return (VariantState::Progressing, 0);
    };
    let status = d.status.clone().unwrap_or_default();
    let ready = status.ready_replicas.unwrap_or(0);
    let done = status.observed_generation >= d.metadata.generation
        && d.spec.as_ref().and_then(|s| s.replicas) == Some(instances)
        && status.replicas.unwrap_or(0) == instances
        && status.updated_replicas.unwrap_or(0) == instances
        && ready == instances;
    if done {
        (VariantState::Ready, ready)
    } else {
        (VariantState::Progressing, ready)
    }
}

/// How the owner's spec and status differ from the final spec and from what R11 says of the
/// Deployments as they are now. Whether the pods become ready is up to the Deployment
/// controller and the (fake) kubelet, not the operator: a variant may stay Progressing, as
/// long as its status says so.
pub(crate) async fn status_differences(
    ctx: &Ctx,
    owner: &OwnerInfo,
    declared: &[Variant],
    deployments: &[Deployment],
    states: &mut BTreeMap<&'static str, usize>,
) -> Vec<String> {
    let obj = match tokio::time::timeout(
        Duration::from_secs(20),
        ctx.api(owner.kind).get(&owner.name),
    )
    .await
    {
        Ok(Ok(obj)) => obj,
        Ok(Err(e)) => return vec![format!("reading {}: {e}", owner.name)],
        Err(_) => return vec![format!("reading {}: no answer", owner.name)],
    };
    let who = format!("{:?} {}", owner.kind, owner.name);
    let (_, spec) = spec_list(&obj, owner.kind);
    if spec != declared {
        return vec![format!(
            "{who}: its spec changed after the run: {spec:?}, final was {declared:?}"
        )];
    }
    if obj.metadata.uid.as_deref() != Some(owner.uid.as_str()) {
        return vec![format!("{who}: uid changed to {:?}", obj.metadata.uid)];
    }
    let status: OwnerStatus = match obj.data.get("status") {
        Some(s) => serde_json::from_value(s.clone()).unwrap(),
        None => return vec![format!("{who}: no status")],
    };
    let mut problems = Vec::new();
    if status.observed_generation != obj.metadata.generation {
        problems.push(format!(
            "{who}: status observedGeneration {:?}, generation {:?}",
            status.observed_generation, obj.metadata.generation
        ));
    }
    let labels: Vec<&str> = status.variants.iter().map(|s| s.label.as_str()).collect();
    let want: Vec<&str> = declared.iter().map(|v| v.label.as_str()).collect();
    if labels != want {
        problems.push(format!("{who}: status lists {labels:?}, spec {want:?}"));
        return problems;
    }
    for (s, v) in status.variants.iter().zip(declared) {
        *states.entry(s.state.as_str()).or_default() += 1;
        let name = variant::deployment_name(&owner.base, &v.label);
        let current = deployments.iter().find(|d| d.name_any() == name);
        let good = if v.label == TAKEN {
            s.state == VariantState::Conflict
        } else {
            let (state, ready) = r11_state(v.instances, current);
            s.state == state
                && s.replicas == v.instances
                && s.ready_replicas == ready
                && s.deployment == name
        };
        if !good {
            let observed = current.map(|d| {
                let st = d.status.clone().unwrap_or_default();
                format!(
                    "generation {:?} observed {:?} replicas {:?} updated {:?} ready {:?}",
                    d.metadata.generation,
                    st.observed_generation,
                    st.replicas,
                    st.updated_replicas,
                    st.ready_replicas
                )
            });
            problems.push(format!(
                "{who}: status of {:?}: {:?} {}/{} (its Deployment now: {observed:?})",
                v.label, s.state, s.ready_replicas, s.replicas
            ));
        }
    }
    if owner.kind == Kind::Mutation && status.secret.as_deref() != Some(&*secret_name(owner)) {
        problems.push(format!("{who}: status secret {:?}", status.secret));
    }
    problems
}

pub(crate) fn secret_name(owner: &OwnerInfo) -> String {
    format!("{}-secret", owner.name)
}

/// R14: the Secret is the one created before the run, with the same token.
pub(crate) async fn secret_differences(
    ctx: &Ctx,
    owner: &OwnerInfo,
    record: &SecretRecord,
) -> Vec<String> {
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &ctx.ns);
    let name = secret_name(owner);
    match tokio::time::timeout(Duration::from_secs(20), api.get_opt(&name)).await {
        Ok(Ok(Some(secret))) => {
            let now = secret_record(&secret);
            if now != *record {
                vec![
                    format!(
                        "Secret {name} changed since its creation: was {:?}, now {:?}",
                        (&record.uid, &record.created),
                        (&now.uid, &now.created)
                    ) + if now.token == record.token {
                        ""
                    } else {
                        ", and its token changed"
                    },
                ]
            } else {
                Vec::new()
            }
        }
        Ok(Ok(None)) => vec![format!("Secret {name} is gone")],
        Ok(Err(e)) => vec![format!("reading Secret {name}: {e}")],
        Err(_) => vec![format!("reading Secret {name}: no answer")],
    }
}

pub(crate) fn secret_record(secret: &Secret) -> SecretRecord {
    SecretRecord {
        uid: secret.metadata.uid.clone().unwrap_or_default(),
        created: format!("{:?}", secret.metadata.creation_timestamp),
        token: secret
            .data
            .as_ref()
            .and_then(|d| d.get("token"))
            .map(|t| String::from_utf8_lossy(&t.0).to_string())
            .unwrap_or_default(),
    }
}
