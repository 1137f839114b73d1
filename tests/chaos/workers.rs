//! The HTTP API without panics, and the workers that edit owners.

use super::*;

// --- the HTTP API, without panics ------------------------------------------------------------------

#[derive(Debug)]
pub(crate) enum Wire {
    Answer(common::http::Reply),
    /// No connection: nothing was sent.
    Unreachable(String),
    /// Sent, and the connection broke before a whole answer came.
    Lost(String),
    /// Sent, and no answer within [`HTTP_TIMEOUT`].
    Hung,
}

pub(crate) async fn send(
    port: u16,
    method: &str,
    path: &str,
    token: &str,
    body: Option<&Value>,
) -> Wire {
    let connect = tokio::time::timeout(
        Duration::from_secs(5),
        TcpStream::connect(("127.0.0.1", port)),
    )
    .await;
    let mut stream = match connect {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => return Wire::Unreachable(e.to_string()),
        Err(_) => return Wire::Unreachable("connect timed out".to_string()),
    };
    let body = body.map(Value::to_string).unwrap_or_default();
    let mut raw = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\
         Authorization: Bearer {token}\r\n"
    );
    if !body.is_empty() {
        write!(
            raw,
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        )
        .unwrap();
    }
    raw.push_str("\r\n");
    raw.push_str(&body);
    if let Err(e) = stream.write_all(raw.as_bytes()).await {
        return Wire::Lost(e.to_string());
    }
    let mut out = Vec::new();
    let read = tokio::time::timeout(HTTP_TIMEOUT, stream.read_to_end(&mut out)).await;
    let Ok(read) = read else { return Wire::Hung };
    let text = String::from_utf8_lossy(&out);
    match common::http::parse(&text) {
        Some(reply) if complete(&reply) => Wire::Answer(reply),
        _ => Wire::Lost(match read {
            Err(e) => e.to_string(),
            Ok(n) => format!("connection closed after {n} bytes without a whole answer"),
        }),
    }
}

/// The message of an error answer (`{"error": "..."}`), or the raw body.
pub(crate) fn error_of(reply: &common::http::Reply) -> String {
    serde_json::from_str::<Value>(&reply.body)
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_string))
        .unwrap_or_else(|| reply.body.clone())
}

/// Whether the body is as long as the Content-Length said.
pub(crate) fn complete(reply: &common::http::Reply) -> bool {
    reply
        .header("content-length")
        .and_then(|l| l.parse::<usize>().ok())
        .is_none_or(|l| reply.body.len() >= l)
}

// --- workers ----------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Channel {
    /// The HTTP API with the Mutation's own token.
    Token,
    /// The HTTP API with the admin token.
    Admin,
    /// A spec edit through the Kubernetes API.
    Kube,
}

impl Channel {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Channel::Token => "api-token",
            Channel::Admin => "api-admin",
            Channel::Kube => "kube-spec",
        }
    }
}

/// One writer of some labels of one owner, with the model of those labels.
pub(crate) struct Worker {
    pub(crate) owner: Arc<OwnerInfo>,
    pub(crate) labels: &'static [&'static str],
    pub(crate) model: BTreeMap<&'static str, BTreeSet<Slot>>,
    pub(crate) rng: Rng,
    /// The last operations, for the message of a violation.
    pub(crate) history: Vec<String>,
}

impl Worker {
    pub(crate) fn new(
        owner: Arc<OwnerInfo>,
        labels: &'static [&'static str],
        initial: &[Variant],
        rng: Rng,
    ) -> Worker {
        let model = labels
            .iter()
            .map(|l| (*l, BTreeSet::from([Slot::of(initial, l)])))
            .collect();
        Worker {
            owner,
            labels,
            model,
            rng,
            history: Vec::new(),
        }
    }

    pub(crate) fn note(&mut self, text: String) {
        if self.history.len() == 16 {
            self.history.remove(0);
        }
        self.history.push(text);
    }

    pub(crate) fn who(&self, label: &str) -> String {
        format!("{:?} {} label {label:?}", self.owner.kind, self.owner.name)
    }

    pub(crate) async fn run(mut self, ctx: Arc<Ctx>, until: Instant) -> Worker {
        while Instant::now() < until {
            let pause = self.rng.millis(150, 1000);
            tokio::time::sleep(pause).await;
            let channel = match (self.owner.kind, self.rng.below(10)) {
                (Kind::MutantDeployment, _) | (Kind::Mutation, 0..=3) => Channel::Kube,
                (Kind::Mutation, 4..=5) => Channel::Admin,
                (Kind::Mutation, _) => Channel::Token,
            };
            let outcome = match channel {
                Channel::Kube => self.spec_edit(&ctx).await,
                Channel::Token | Channel::Admin => self.api_edit(&ctx, channel).await,
            };
            if outcome == Outcome::Uncertain {
                tokio::time::sleep(SETTLE).await;
            }
        }
        self
    }

    /// An add, scale or remove through the HTTP API.
    pub(crate) async fn api_edit(&mut self, ctx: &Ctx, channel: Channel) -> Outcome {
        let label = *self.rng.pick(self.labels);
        let possible = self.model[label].clone();
        let maybe_absent = possible.contains(&Slot::Absent);
        let maybe_present = possible.iter().any(|s| matches!(s, Slot::Present { .. }));
        let r = self.rng.below(100);
        // Mostly what can succeed, sometimes what must be refused.
        let op = match (maybe_absent, maybe_present, r) {
            (true, false, 0..=89) | (true, true, 0..=33) | (false, true, 0..=4) => Op::Add {
                env: self.rng.env(),
                instances: self.rng.instances(),
            },
            (true, false, 90..=94) | (true, true, 34..=66) | (false, true, 5..=64) => Op::Scale {
                instances: self.rng.instances(),
            },
            _ => Op::Remove,
        };
        let token = match channel {
            Channel::Admin => ADMIN,
            _ => self.owner.token(),
        };
        let variants = format!(
            "/api/v1/namespaces/{}/mutations/{}/variants",
            ctx.ns, self.owner.name
        );
        let (method, path, body) = match &op {
            Op::Add { env, instances } => (
                "POST",
                variants,
                Some(json!({ "label": label, "env": env, "instances": instances })),
            ),
            Op::Scale { instances } => (
                "PATCH",
                format!("{variants}/{label}"),
                Some(json!({ "instances": instances })),
            ),
            Op::Remove => ("DELETE", format!("{variants}/{label}"), None),
        };
        let wire = send(ctx.api_port, method, &path, token, body.as_ref()).await;
        if matches!(wire, Wire::Hung) {
            // The request may still be in progress: end it, so it cannot land later.
            ctx.kill_operator(Duration::ZERO, true).await;
        }
        let who = self.who(label);
        let by_token = matches!(channel, Channel::Token);
        let done: Vec<Slot> = possible
            .iter()
            .filter_map(|s| op.apply(s, by_token))
            .collect();
        // R9: a variant on the name of a foreign Deployment is refused up front (409),
        // when the operator knows of that Deployment; nothing changes, whatever the label held.
        let foreign_name = matches!(
            (&op, &wire),
            (Op::Add { .. }, Wire::Answer(reply))
                if label == TAKEN
                    && reply.status == 409
                    && error_of(reply).contains("already exists and")
        );
        let outcome = match &wire {
            Wire::Unreachable(_) => Outcome::Unreachable,
            Wire::Lost(_) | Wire::Hung => Outcome::Uncertain,
            Wire::Answer(reply) => match (&op, reply.status) {
                (Op::Add { .. }, 201) | (Op::Scale { .. }, 200) | (Op::Remove, 204) => {
                    Outcome::Acked
                }
                (Op::Add { .. }, 409) if foreign_name => Outcome::Refused,
                // Refused for the label, and for nothing else (the body says which).
                (Op::Add { .. }, 409)
                    if error_of(reply).contains(&format!("variant {label:?} already exists")) =>
                {
                    Outcome::Refused
                }
                (Op::Scale { .. } | Op::Remove, 404)
                    if error_of(reply).contains(&format!("variant {label:?} not found")) =>
                {
                    Outcome::Refused
                }
                // R32: the token's scale or removal of a variant it did not make.
                (Op::Scale { .. } | Op::Remove, 403)
                    if by_token
                        && error_of(reply)
                            .contains(&format!("variant {label:?}: not made by a token")) =>
                {
                    Outcome::Refused
                }
                (_, status) if status >= 500 => Outcome::Uncertain,
                (_, status) => {
                    ctx.violation(format!(
                        "{who}: {} {path} answered {status}: {}",
                        method, reply.body
                    ));
                    Outcome::Uncertain
                }
            },
        };
        let answer = match &wire {
            Wire::Answer(reply) => reply.status.to_string(),
            Wire::Unreachable(e) => format!("unreachable: {e}"),
            Wire::Lost(e) => format!("lost: {e}"),
            Wire::Hung => "no answer".to_string(),
        };
        self.note(format!(
            "{} {} {label} {op:?} -> {answer}",
            channel.name(),
            op.name()
        ));
        ctx.count(channel.name(), op.name(), outcome);
        match outcome {
            Outcome::Unreachable => {}
            Outcome::Refused if foreign_name => {}
            Outcome::Uncertain => {
                self.model.get_mut(label).unwrap().extend(done);
            }
            Outcome::Refused => {
                // Refused for being there (409), absent (404) or not the token's (403).
                let present = |s: &Slot| matches!(s, Slot::Present { .. });
                let status = match &wire {
                    Wire::Answer(reply) => reply.status,
                    _ => 0,
                };
                let left: BTreeSet<Slot> = possible
                    .iter()
                    .filter(|s| op.apply(s, by_token).is_none())
                    .filter(|s| match status {
                        403 => matches!(
                            s,
                            Slot::Present {
                                by_token: false,
                                ..
                            }
                        ),
                        404 => !present(s),
                        _ => true,
                    })
                    .cloned()
                    .collect();
                if left.is_empty() {
                    ctx.violation(format!(
                        "{who}: {method} {path} was refused ({answer}), but the writes before \
                         it allow only {possible:?}, where it succeeds; recent: {:#?}",
                        self.history
                    ));
                    self.resync(ctx, label).await;
                } else {
                    self.model.insert(label, left);
                }
            }
            Outcome::Acked => {
                let Wire::Answer(reply) = &wire else {
                    unreachable!()
                };
                // The answer shows env and instances; whose the variant is, the model knows.
                let answered: Vec<Slot> = match &op {
                    Op::Remove => vec![Slot::Absent],
                    _ => {
                        let view = reply.json();
                        let env: BTreeMap<String, String> =
                            serde_json::from_value(view["env"].clone()).unwrap();
                        let instances = view["instances"].as_i64().unwrap() as i32;
                        [true, false]
                            .into_iter()
                            .map(|by_token| Slot::Present {
                                env: env.clone(),
                                instances,
                                by_token,
                            })
                            .collect()
                    }
                };
                let after: BTreeSet<Slot> = answered
                    .iter()
                    .filter(|s| done.contains(s))
                    .cloned()
                    .collect();
                if after.is_empty() {
                    ctx.violation(format!(
                        "{who}: {method} {path} answered {} with {:?}, but from what the \
                         writes before it allow ({possible:?}) it can only give {done:?}; \
                         recent: {:#?}",
                        reply.status, answered[0], self.history
                    ));
                    self.model.insert(label, answered.into_iter().collect());
                } else {
                    self.model.insert(label, after);
                }
            }
        }
        outcome
    }

    /// Sets the model of `label` to what the spec holds now (after a violation, so one
    /// problem is reported once).
    pub(crate) async fn resync(&mut self, ctx: &Ctx, label: &'static str) {
        let obj = ctx.read_owner(self.owner.kind, &self.owner.name).await;
        let (_, list) = spec_list(&obj, self.owner.kind);
        self.model
            .insert(label, BTreeSet::from([Slot::of(&list, label)]));
    }

    /// Checks this worker's labels in a spec just read against the model.
    pub(crate) fn verify(&mut self, ctx: &Ctx, list: &[Variant], when: &str) {
        for &label in self.labels {
            let count = list.iter().filter(|v| v.label == label).count();
            if count > 1 {
                ctx.violation(format!(
                    "{} {when}: declared {count} times: {list:?}",
                    self.who(label)
                ));
            }
            let seen = Slot::of(list, label);
            if !self.model[label].contains(&seen) {
                ctx.violation(format!(
                    "{} {when}: the spec holds {seen:?}, but the acknowledged writes allow only \
                     {:?}; recent: {:#?}",
                    self.who(label),
                    self.model[label],
                    self.history
                ));
                self.model.insert(label, BTreeSet::from([seen]));
            }
        }
    }

    /// A read-modify-write of the owner's spec through the Kubernetes API, guarded by the
    /// resourceVersion that was read.
    pub(crate) async fn spec_edit(&mut self, ctx: &Ctx) -> Outcome {
        let kind = self.owner.kind;
        let obj = ctx.read_owner(kind, &self.owner.name).await;
        let (rv, list) = spec_list(&obj, kind);
        self.verify(ctx, &list, "read before a spec edit");
        let label = *self.rng.pick(self.labels);
        let op = match Slot::of(&list, label) {
            Slot::Absent => Op::Add {
                env: self.rng.env(),
                instances: self.rng.instances(),
            },
            Slot::Present { .. } if self.rng.below(10) < 6 => Op::Scale {
                instances: self.rng.instances(),
            },
            Slot::Present { .. } => Op::Remove,
        };
        let mut new_list = list.clone();
        match &op {
            // Half of what the owner adds it hands to the token (R32).
            Op::Add { env, instances } => new_list.push(Variant {
                label: label.to_string(),
                env: env.clone().into(),
                instances: *instances,
                by_token: (self.rng.below(2) == 0).then_some(true),
                ..Variant::default()
            }),
            Op::Scale { instances } => {
                for v in new_list.iter_mut().filter(|v| v.label == label) {
                    v.instances = *instances;
                }
            }
            Op::Remove => new_list.retain(|v| v.label != label),
        }
        let patch = json!({
            "metadata": { "resourceVersion": rv },
            "spec": { kind.field(): new_list },
        });
        let params = PatchParams {
            field_manager: Some("chaos-test".to_string()),
            ..PatchParams::default()
        };
        let api = ctx.api(kind);
        let result = tokio::time::timeout(
            KUBE_WRITE_TIMEOUT,
            api.patch(&self.owner.name, &params, &Patch::Merge(&patch)),
        )
        .await;
        let (outcome, answer) = match &result {
            Ok(Ok(_)) => (Outcome::Acked, "200".to_string()),
            Ok(Err(kube::Error::Api(s))) if s.code == 409 || s.code == 429 => {
                (Outcome::Refused, s.code.to_string())
            }
            Ok(Err(kube::Error::Api(s))) if s.code >= 500 => {
                (Outcome::Uncertain, format!("{} {}", s.code, s.message))
            }
            Ok(Err(kube::Error::Api(s))) => {
                ctx.violation(format!(
                    "{}: the spec edit was rejected: {} {}",
                    self.who(label),
                    s.code,
                    s.message
                ));
                (Outcome::Uncertain, s.code.to_string())
            }
            Ok(Err(e)) if connection_refused(e) => (Outcome::Unreachable, e.to_string()),
            Ok(Err(e)) => (Outcome::Uncertain, e.to_string()),
            Err(_) => (Outcome::Uncertain, "timed out".to_string()),
        };
        self.note(format!(
            "kube-spec {} {label} {op:?} -> {answer}",
            op.name()
        ));
        ctx.count(Channel::Kube.name(), op.name(), outcome);
        for &l in self.labels {
            let written = Slot::of(&new_list, l);
            match outcome {
                Outcome::Acked => {
                    self.model.insert(l, BTreeSet::from([written]));
                }
                Outcome::Uncertain => {
                    self.model.get_mut(l).unwrap().insert(written);
                }
                Outcome::Refused | Outcome::Unreachable => {}
            }
        }
        outcome
    }
}

/// The resourceVersion and the variants of an owner read as a dynamic object.
pub(crate) fn spec_list(obj: &DynamicObject, kind: Kind) -> (String, Vec<Variant>) {
    let rv = obj.metadata.resource_version.clone().unwrap();
    let list = obj.data["spec"]
        .get(kind.field())
        .cloned()
        .map(|v| serde_json::from_value(v).unwrap())
        .unwrap_or_default();
    (rv, list)
}
