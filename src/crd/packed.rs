//! [`PackedJson`]: compact JSON text with the phrases every Kubernetes object repeats (the API
//! server's defaults, the mutantops labels) each replaced by one byte, for the texts the caches
//! keep of every generated object.
//!
//! A generated Deployment's spec, as the API server returns it, is mostly the same phrases in
//! every object: `"terminationMessagePath":"/dev/termination-log"`, the rolling-update
//! strategy, the three mutantops labels in the selector and again in the pod template. JSON
//! text never holds a byte below 0x20 (control characters in strings are escaped), so those
//! bytes name the phrases of a fixed table; the text is unpacked, byte for byte as it was, only
//! where it is compared. Nothing is lost: a text with a phrase changed by hand simply keeps
//! that part unpacked.

use std::fmt;

/// The phrases, one byte each: byte `0x01 + i` is `PHRASES[i]`. Longer phrases first where
/// one begins another. Byte [`ESCAPE`] keeps the byte after it as it is (for a text that
/// holds control bytes, which no JSON writer produces).
const PHRASES: [&str; 30] = [
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
];

/// The byte that keeps the next one literal.
const ESCAPE: u8 = 0x1f;

/// Compact JSON text, packed (see the module's documentation).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct PackedJson(Box<str>);

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
                    if b < 0x20 {
                        out.push(ESCAPE);
                    }
                    out.push(b);
                    at += 1;
                }
            }
        }
        out.shrink_to_fit();
        // Only ASCII bytes were put in or taken out: still UTF-8.
        match String::from_utf8(out) {
            Ok(packed) => PackedJson(packed.into_boxed_str()),
            Err(_) => PackedJson(escaped(text)),
        }
    }

    /// The text as it was given.
    pub fn unpack(&self) -> String {
        let bytes = self.0.as_bytes();
        let mut out: Vec<u8> = Vec::with_capacity(bytes.len() * 4);
        let mut literal = false;
        for &b in bytes {
            if literal {
                out.push(b);
                literal = false;
            } else if b == ESCAPE {
                literal = true;
            } else if let Some(phrase) = (b >= 1).then(|| PHRASES.get(usize::from(b) - 1)).flatten()
            {
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
    u8::try_from(i + 1).unwrap_or(ESCAPE)
}

/// `text` with every control byte escaped, no phrase packed.
fn escaped(text: &str) -> Box<str> {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if u32::from(c) < 0x20 {
            out.push(char::from(ESCAPE));
        }
        out.push(c);
    }
    out.into_boxed_str()
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
        let spec = r#"{"annotations":{"mutantops.neiam.org/desired-hash":"8d3b"},"spec":{"replicas":0,"selector":{"matchLabels":{"app":"m1","mutantops.neiam.org/kind":"mutation","mutantops.neiam.org/owner":"m1","mutantops.neiam.org/variant":"v0"}},"template":{"metadata":{"labels":{"app":"m1"}},"spec":{"containers":[{"name":"app","image":"x","env":[{"name":"A","value":"1"},{"name":"B","value":"é ✓"}],"resources":{},"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}],"restartPolicy":"Always","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst","securityContext":{},"schedulerName":"default-scheduler"}},"strategy":{"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":"25%","maxSurge":"25%"}},"revisionHistoryLimit":10,"progressDeadlineSeconds":600}}"#;
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
            "\u{1}\u{1f}raw \"\u{0}\" ✓\n",
            "",
            "\"",
        ] {
            assert_eq!(PackedJson::pack(text).unpack(), text);
        }
        assert_eq!(format!("{:?}", PackedJson::pack("{}")), r#""{}""#);
        assert!(PHRASES.len() < usize::from(ESCAPE));
    }
}
