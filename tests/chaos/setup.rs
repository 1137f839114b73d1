//! Setting up: the cluster script, the owners, the foreign Deployments, the figures.

use super::*;

// --- set-up -------------------------------------------------------------------------------------

/// `scripts/cluster`, after checking that the cluster it manages (`MUTANTOPS_CLUSTER_DIR`, else
/// `<repo>/.cluster`) is the one in `KUBECONFIG`: the test restarts that API server.
pub(crate) fn cluster_script() -> PathBuf {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let state = std::env::var_os("MUTANTOPS_CLUSTER_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo.join(".cluster"));
    let theirs = state.join("kubeconfig");
    let ours = std::env::var_os("KUBECONFIG").map(PathBuf::from);
    let same = match (&ours, theirs.canonicalize()) {
        (Some(ours), Ok(theirs)) => ours.canonicalize().ok() == Some(theirs),
        _ => false,
    };
    assert!(
        same,
        "the chaos test restarts the API server of the cluster in {} (MUTANTOPS_CLUSTER_DIR, \
         else <repo>/.cluster), so KUBECONFIG must be its kubeconfig ({}), not {ours:?}. Run \
         `scripts/cluster up` and `eval \"$(scripts/cluster env)\"` with the same \
         MUTANTOPS_CLUSTER_DIR.",
        state.display(),
        theirs.display()
    );
    repo.join("scripts/cluster")
}

pub(crate) fn env_number(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    Some(
        value
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("{name}={value:?}: {e}")),
    )
}

/// Creates a Deployment that carries `owner`'s labels but no ownerReference.
pub(crate) async fn create_foreign(ctx: &Ctx, owner: &OwnerInfo, variant_label: &str) -> Foreign {
    let name = variant::deployment_name(&owner.base, variant_label);
    let labels = BTreeMap::from([
        (variant::OWNER_LABEL.to_string(), owner.name.clone()),
        (
            variant::VARIANT_LABEL.to_string(),
            variant_label.to_string(),
        ),
        (
            variant::KIND_LABEL.to_string(),
            owner.kind.owner_kind().label_value().to_string(),
        ),
    ]);
    let d: Deployment = from_json(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": { "name": name, "labels": labels },
        "spec": {
            "replicas": 0,
            "selector": { "matchLabels": { "foreign": name } },
            "template": {
                "metadata": { "labels": { "foreign": name } },
                "spec": { "containers": [{ "name": "x", "image": "registry.example/x:1" }] }
            }
        }
    }));
    let api: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ctx.ns);
    let created = api.create(&PostParams::default(), &d).await.unwrap();
    Foreign {
        name,
        uid: created.metadata.uid.clone().unwrap(),
        generation: created.metadata.generation,
        labels: created.labels().clone(),
    }
}

/// The first variants of owner number `i`.
pub(crate) fn initial_variants(i: usize) -> Vec<Variant> {
    let mut list = vec![Variant {
        label: "a".to_string(),
        env: BTreeMap::from([("V_0".to_string(), format!("first-{i}"))]).into(),
        instances: 1,
        ..Variant::default()
    }];
    if i.is_multiple_of(2) {
        list.push(Variant {
            label: "d".to_string(),
            env: Default::default(),
            instances: 0,
            ..Variant::default()
        });
    }
    list
}

/// Creates owner `name`: Mutations `m0` and `m1` through the HTTP API, the others through the
/// Kubernetes API. Waits for a Mutation's Secret and records it.
pub(crate) async fn create_owner(ctx: &Ctx, kind: Kind, name: &str, i: usize) -> OwnerInfo {
    let base_name = format!("{name}-app");
    let variants = initial_variants(i);
    // R32: the owner lets the token set the variables the model writes, the base's MODE
    // among them (a token replaces a base variable only when the owner lists it).
    let access = json!({ "env": ["MODE", "V_0", "V_1", "V_2"] });
    if kind == Kind::Mutation && i < 2 {
        let body = json!({ "name": name, "deployment": base(&base_name), "variants": variants,
                           "deviceAccess": access });
        let path = format!("/api/v1/namespaces/{}/mutations", ctx.ns);
        match send(ctx.api_port, "POST", &path, ADMIN, Some(&body)).await {
            Wire::Answer(reply) if reply.status == 201 => {}
            other => panic!("creating Mutation {name} through the API: {other:?}"),
        }
    } else {
        let manifest = json!({
            "apiVersion": "neiam.org/v1",
            "kind": format!("{:?}", kind),
            "metadata": { "name": name },
            "spec": { "deployment": base(&base_name), kind.field(): variants },
        });
        let mut manifest = manifest;
        if kind == Kind::Mutation {
            manifest["spec"]["deviceAccess"] = access;
        }
        let obj: DynamicObject = serde_json::from_value(manifest).unwrap();
        ctx.api(kind)
            .create(&PostParams::default(), &obj)
            .await
            .unwrap_or_else(|e| panic!("creating {kind:?} {name}: {e}"));
    }
    let obj = ctx.read_owner(kind, name).await;
    let secret = match kind {
        Kind::MutantDeployment => None,
        Kind::Mutation => {
            let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &ctx.ns);
            let secret_name = format!("{name}-secret");
            let secret = common::wait_for(
                &format!("Secret {secret_name}"),
                Duration::from_secs(60),
                || async {
                    match api.get_opt(&secret_name).await {
                        Ok(Some(s)) => Ok(s),
                        Ok(None) => Err("absent".to_string()),
                        Err(e) => Err(e.to_string()),
                    }
                },
            )
            .await;
            Some(secret_record(&secret))
        }
    };
    OwnerInfo {
        kind,
        name: name.to_string(),
        base: base_name,
        uid: obj.metadata.uid.clone().unwrap(),
        secret,
    }
}

/// Waits until the operator's API answers a list with the admin token.
pub(crate) async fn wait_api(ctx: &Ctx) {
    let path = format!("/api/v1/namespaces/{}/mutations", ctx.ns);
    common::wait_for("the HTTP API to serve", Duration::from_secs(60), || async {
        match send(ctx.api_port, "GET", &path, ADMIN, None).await {
            Wire::Answer(reply) if reply.status == 200 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}

/// How long convergence took.
pub(crate) struct Convergence {
    /// From the last fault until the Deployments and Secrets were exactly right.
    pub(crate) objects: Duration,
    /// From the last fault until the statuses said what R11 says of the Deployments too.
    pub(crate) statuses: Duration,
    /// From the last write until the statuses were right.
    pub(crate) since_write: Duration,
    /// The variants by state as the statuses report them at the end.
    pub(crate) states: BTreeMap<&'static str, usize>,
}

pub(crate) fn figures(ctx: &Ctx, seed: u64, seconds: u64, converged: &Convergence) -> String {
    let stats = ctx.stats.lock().unwrap();
    let mut out = String::new();
    writeln!(
        out,
        "chaos figures (seed {seed}, {seconds} s):\n  {:<18}{:>8}{:>9}{:>11}{:>13}",
        "writes", "2xx", "refused", "uncertain", "unreachable"
    )
    .unwrap();
    let mut totals = [0u64; 4];
    let kinds: BTreeSet<(&str, &str)> = stats.ops.keys().map(|(c, o, _)| (*c, *o)).collect();
    for (channel, op) in kinds {
        let n: Vec<u64> = OUTCOMES
            .iter()
            .map(|o| stats.ops.get(&(channel, op, *o)).copied().unwrap_or(0))
            .collect();
        for (t, x) in totals.iter_mut().zip(&n) {
            *t += x;
        }
        writeln!(
            out,
            "  {:<18}{:>8}{:>9}{:>11}{:>13}",
            format!("{channel} {op}"),
            n[0],
            n[1],
            n[2],
            n[3]
        )
        .unwrap();
    }
    let all: u64 = totals.iter().sum();
    let restart = &stats.apiserver_restart_seconds;
    let mean_restart = if restart.is_empty() {
        0.0
    } else {
        restart.iter().sum::<f64>() / restart.len() as f64
    };
    write!(
        out,
        "  {:<18}{:>8}{:>9}{:>11}{:>13}\n\
         chaos: seed={seed} seconds={seconds} writes={all} (2xx={} refused={} uncertain={} \
         unreachable={}) operator-kills={} (hung-request={}) operator-self-exits={} \
         apiserver-restarts={} (mean {mean_restart:.1}s) after the last fault: Deployments \
         exact in {:.1}s, statuses right in {:.1}s ({:.1}s after the last write); variants at \
         the end: {:?}; violations={}",
        "total",
        totals[0],
        totals[1],
        totals[2],
        totals[3],
        totals[0],
        totals[1],
        totals[2],
        totals[3],
        stats.operator_kills,
        stats.hung_kills,
        stats.self_exits.len(),
        stats.apiserver_restarts,
        converged.objects.as_secs_f64(),
        converged.statuses.as_secs_f64(),
        converged.since_write.as_secs_f64(),
        converged.states,
        stats.violations.len()
    )
    .unwrap();
    out
}

/// A namespace named after `prefix` with the CRDs installed, and the operator running in it
/// (the admin token, a short Lease; fixed ports and one log across its restarts, as a pod
/// behind its Service) with its HTTP API answering.
pub(crate) async fn start(prefix: &str) -> (TestNamespace, Arc<Ctx>) {
    let script = cluster_script();
    let ns = TestNamespace::new(prefix).await;
    common::install_crds(&ns.client).await;
    let operator = common::Operator::start_with(
        &ns.name,
        &[
            ("MUTANT_API_TOKEN", ADMIN),
            ("MUTANT_LEASE_DURATION_SECONDS", LEASE_SECONDS),
        ],
    );
    let api_port = operator.api_port;
    say(&format!(
        "{prefix}: namespace {}, operator log {}",
        ns.name,
        operator.log.display()
    ));
    let ctx = Arc::new(Ctx {
        client: ns.client.clone(),
        ns: ns.name.clone(),
        api_port,
        script,
        operator: tokio::sync::Mutex::new(operator),
        stats: Mutex::new(Stats::default()),
    });
    wait_api(&ctx).await;
    (ns, ctx)
}
