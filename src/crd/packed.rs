//! [`PackedJson`]: compact JSON text with the phrases every Kubernetes object repeats (the API
//! server's defaults, the mutantops labels) each replaced by one byte, for the texts the caches
//! keep of every generated object.
//!
//! A generated Deployment's spec, as the API server returns it, is mostly the same phrases in
//! every object: `"terminationMessagePath":"/dev/termination-log"`, the rolling-update
//! strategy, the three mutantops labels in the selector and again in the pod template. JSON
//! text never holds a byte below 0x20 (control characters in strings are escaped) and, being
//! UTF-8, never the bytes 0xc0, 0xc1 and 0xf5 to 0xff: those bytes and DEL (0x7f, escaped where a
//! text holds it) name the phrases of a fixed table; the text is unpacked, byte for byte as it
//! was, only where it is compared. Nothing is lost: a text with a phrase changed by hand simply
//! keeps that part unpacked.

use std::fmt;

/// The phrases, one byte each: `PHRASES[i]` is named by `TOKENS[i]`. Longer phrases first
/// where one begins another. Byte [`ESCAPE`] keeps the byte after it as it is (for a text that
/// holds control bytes or DEL, which no JSON writer produces).
const PHRASES: [&str; 36] = [
    r#""strategy":{"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":"25%","maxSurge":"25%"}}"#,
    r#""terminationMessagePath":"/dev/termination-log""#,
    r#""mutantops.neiam.org/kind":"mutantdeployment""#,
    r#""mutantops.neiam.org/kind":"mutation""#,
    r#""schedulerName":"default-scheduler""#,
    r#""terminationGracePeriodSeconds":30"#,
    r#""terminationMessagePolicy":"File""#,
    r#""mutantops.neiam.org/desired-hash":""#,
    r#""mutantops.neiam.org/variant":""#,
    r#""imagePullPolicy":"IfNotPresent""#,
    r#""template":{"metadata":{"labels":{"#,
    r#""mutantops.neiam.org/owner":""#,
    r#""progressDeadlineSeconds":600"#,
    r#""selector":{"matchLabels":{"#,
    r#""dnsPolicy":"ClusterFirst""#,
    r#""revisionHistoryLimit":10"#,
    r#""restartPolicy":"Always""#,
    r#""internalTrafficPolicy":"Cluster""#,
    r#""ipFamilyPolicy":"SingleStack""#,
    r#""sessionAffinity":"None""#,
    r#""spec":{"containers":[{"#,
    r#""securityContext":{}"#,
    r#""ipFamilies":["IPv4"]"#,
    r#""protocol":"TCP""#,
    r#"{"annotations":"#,
    r#""resources":{}"#,
    r#",{"name":""#,
    r#""value":""#,
    r#""name":""#,
    r#""env":["#,
    // Set by the Deployment controller on every Deployment.
    r#""deployment.kubernetes.io/revision":""#,
    // Where the annotations of a generated Deployment end and its spec begins.
    r#""},"spec":{"replicas":"#,
    r#","image":""#,
    // The end of a map of labels, of a list of env.
    r#""}},"#,
    r#""}],"#,
    r#""app":""#,
];

/// The byte naming each phrase: the control bytes but [`ESCAPE`], DEL, then the bytes UTF-8
/// never holds.
const TOKENS: [u8; 44] = [
    0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10,
    0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x7f, 0xc0,
    0xc1, 0xf5, 0xf6, 0xf7, 0xf8, 0xf9, 0xfa, 0xfb, 0xfc, 0xfd, 0xfe, 0xff,
];

/// The byte that keeps the next one literal.
const ESCAPE: u8 = 0x1f;

/// Whether byte `b` of a text must be escaped to be kept as it is.
fn needs_escape(b: u8) -> bool {
    b < 0x20 || b == 0x7f
}

/// Compact JSON text, packed (see the module's documentation).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct PackedJson(Box<[u8]>);

impl PackedJson {
    /// Packs `text`.
    pub fn pack(text: &str) -> PackedJson {
        let bytes = text.as_bytes();
        let mut out: Vec<u8> = Vec::with_capacity(bytes.len() / 2);
        let mut at = 0;
        while let Some(&b) = bytes.get(at) {
            let rest = bytes.get(at..).unwrap_or_default();
            let phrase = if b == b'"' || b == b'{' || b == b',' {
                PHRASES.iter().position(|p| rest.starts_with(p.as_bytes()))
            } else {
                None
            };
            match phrase {
                Some(i) => {
                    out.push(token(i));
                    at += PHRASES.get(i).map_or(1, |p| p.len());
                }
                None => {
                    if needs_escape(b) {
                        out.push(ESCAPE);
                    }
                    out.push(b);
                    at += 1;
                }
            }
        }
        PackedJson(out.into_boxed_slice())
    }

    /// The text as it was given.
    pub fn unpack(&self) -> String {
        let mut out: Vec<u8> = Vec::with_capacity(self.0.len() * 4);
        let mut literal = false;
        for &b in &self.0 {
            if literal {
                out.push(b);
                literal = false;
            } else if b == ESCAPE {
                literal = true;
            } else if let Some(phrase) = phrase_of(b) {
                out.extend_from_slice(phrase.as_bytes());
            } else {
                out.push(b);
            }
        }
        String::from_utf8(out).unwrap_or_default()
    }

    /// The packed form's length in bytes.
    pub fn packed_len(&self) -> usize {
        self.0.len()
    }
}

/// Byte of phrase `i`.
fn token(i: usize) -> u8 {
    TOKENS.get(i).copied().unwrap_or(ESCAPE)
}

/// The phrase byte `b` names, if it names one: [`TOKENS`] by ranges, so that a byte of text
/// (every byte of an unpacked text passes here) costs a comparison or two.
fn phrase_of(b: u8) -> Option<&'static str> {
    let i = match b {
        0x01..=0x1e => usize::from(b) - 1,
        0x7f => 30,
        0xc0 | 0xc1 => usize::from(b - 0xc0) + 31,
        0xf5..=0xff => usize::from(b - 0xf5) + 33,
        _ => return None,
    };
    PHRASES.get(i).copied()
}

impl fmt::Debug for PackedJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.unpack(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // R5, R12: what is compared is exactly what was observed
    #[test]
    fn packing_gives_back_the_text() {
        let spec = r#"{"annotations":{"deployment.kubernetes.io/revision":"3","mutantops.neiam.org/desired-hash":"8d3b"},"spec":{"replicas":0,"selector":{"matchLabels":{"app":"m1","mutantops.neiam.org/kind":"mutation","mutantops.neiam.org/owner":"m1","mutantops.neiam.org/variant":"v0"}},"template":{"metadata":{"labels":{"app":"m1"}},"spec":{"containers":[{"name":"app","image":"x","env":[{"name":"A","value":"1"},{"name":"B","value":"é ✓"}],"resources":{},"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}],"restartPolicy":"Always","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst","securityContext":{},"schedulerName":"default-scheduler"}},"strategy":{"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":"25%","maxSurge":"25%"}},"revisionHistoryLimit":10,"progressDeadlineSeconds":600}}"#;
        let packed = PackedJson::pack(spec);
        assert_eq!(packed.unpack(), spec);
        assert!(
            packed.packed_len() * 3 < spec.len(),
            "{}",
            packed.packed_len()
        );
        // a phrase edited by hand stays as written; control bytes come back too
        for text in [
            r#"{"terminationMessagePath":"/dev/termination-log2","name":"""#,
            "\u{1}\u{1f}raw \"\u{0}\" ✓\n\u{7f}",
            "",
            "\"",
        ] {
            assert_eq!(PackedJson::pack(text).unpack(), text);
        }
        assert_eq!(format!("{:?}", PackedJson::pack("{}")), r#""{}""#);
        assert!(PHRASES.len() <= TOKENS.len());
        assert!(!TOKENS.contains(&ESCAPE));
        // no byte of any character's UTF-8 is a token, but the escaped ones
        let mut buf = [0; 4];
        for c in (0..=0x10_ffff).filter_map(char::from_u32) {
            for &b in c.encode_utf8(&mut buf).as_bytes() {
                assert!(needs_escape(b) || !TOKENS.contains(&b), "{c:?}");
            }
        }
        // every phrase has a byte of its own, and that byte names it; no other byte does
        for (i, phrase) in PHRASES.iter().enumerate() {
            assert_eq!(phrase_of(token(i)), Some(*phrase));
            assert_eq!(PackedJson::pack(phrase).packed_len(), 1);
        }
        for b in 0..=u8::MAX {
            let named = TOKENS
                .iter()
                .position(|&t| t == b)
                .and_then(|i| PHRASES.get(i));
            assert_eq!(phrase_of(b), named.copied(), "{b:#x}");
        }
    }
}
