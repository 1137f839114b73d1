//! Any value being decoded, written straight out as compact JSON text, without building a
//! `serde_json::Value` tree first.
//!
//! The caches keep a base Deployment, or the spec of a generated one, as text. Going through a
//! `Value` made some fifty short-lived allocations per object, interleaved with the ones the
//! cache keeps; on thousands of objects that is what fragments an allocator's memory (musl's
//! most). [`write_compact`] visits the value as the decoder reads it and appends its text.

use std::fmt::{self, Write as _};

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// Decodes one value of any shape from `deserializer` and appends it to `out` as compact
/// JSON: keys in the order given, no whitespace.
pub fn write_compact<'de, D: Deserializer<'de>>(
    deserializer: D,
    out: &mut String,
) -> Result<(), D::Error> {
    Compact(out).deserialize(deserializer)
}

/// Compact JSON text of whatever value was decoded, for fields kept as text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompactText(pub String);

impl<'de> serde::Deserialize<'de> for CompactText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut text = String::new();
        write_compact(deserializer, &mut text)?;
        Ok(CompactText(text))
    }
}

struct Compact<'a>(&'a mut String);

impl<'de> DeserializeSeed<'de> for Compact<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

/// Appends `text` as a JSON string.
fn string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

impl<'de> Visitor<'de> for Compact<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<(), E> {
        self.0.push_str(if v { "true" } else { "false" });
        Ok(())
    }

    fn visit_i64<E>(self, v: i64) -> Result<(), E> {
        let _ = write!(self.0, "{v}");
        Ok(())
    }

    fn visit_u64<E>(self, v: u64) -> Result<(), E> {
        let _ = write!(self.0, "{v}");
        Ok(())
    }

    fn visit_f64<E>(self, v: f64) -> Result<(), E> {
        if !v.is_finite() {
            self.0.push_str("null");
        } else if v.fract() == 0.0 && v.abs() < 1e15 {
            // keep it a float: `1.0` stays `1.0`, as a `Value` would write it
            let _ = write!(self.0, "{v:.1}");
        } else {
            let _ = write!(self.0, "{v}");
        }
        Ok(())
    }

    fn visit_str<E>(self, v: &str) -> Result<(), E> {
        string(self.0, v);
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        self.0.push_str("null");
        Ok(())
    }

    fn visit_none<E>(self) -> Result<(), E> {
        self.0.push_str("null");
        Ok(())
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let out = self.0;
        out.push('[');
        let mut first = true;
        loop {
            let mark = out.len();
            if !first {
                out.push(',');
            }
            if seq.next_element_seed(Compact(&mut *out))?.is_none() {
                out.truncate(mark);
                break;
            }
            first = false;
        }
        out.push(']');
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let out = self.0;
        out.push('{');
        let mut first = true;
        loop {
            let mark = out.len();
            if !first {
                out.push(',');
            }
            if map.next_key_seed(Compact(&mut *out))?.is_none() {
                out.truncate(mark);
                break;
            }
            out.push(':');
            map.next_value_seed(Compact(&mut *out))?;
            first = false;
        }
        out.push('}');
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn compact(text: &str) -> String {
        let mut out = String::new();
        let mut de = serde_json::Deserializer::from_str(text);
        write_compact(&mut de, &mut out).unwrap_or_else(|e| panic!("{e}"));
        out
    }

    // R1, R10: what is decoded is kept as given, compact
    #[test]
    fn any_json_comes_out_compact_and_equal() {
        let text = r#" { "b": [1, -2, 3.5, 1.0, true, false, null, {}, []],
            "a": "quote \" backslash \\ newline \n tab \t bell \u0007 é ✓",
            "nested": {"x": {"y": [[], [{"z": 18446744073709551615}]]}} } "#;
        let out = compact(text);
        assert!(
            out.starts_with(r#"{"b":[1,-2,3.5,1.0,true,false,null,{},[]],"a":"#),
            "{out}"
        );
        let again: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
        let original: Value = serde_json::from_str(text).unwrap_or_default();
        assert_eq!(again, original);
    }

    // the same through a buffering deserializer (a watch event read by its tag first)
    #[test]
    fn a_value_deserializer_works_too() {
        let value = json!({"k": [1, "two", {"three": 3.25}], "n": null});
        let mut out = String::new();
        write_compact(value.clone(), &mut out).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            serde_json::from_str::<Value>(&out).unwrap_or_default(),
            value
        );
    }
}
