//! [`StrMap`]: a small map of strings to strings (a variant's `env`, a cached object's labels)
//! packed into one text, for objects the caches hold by the thousand.
//!
//! A `BTreeMap<String, String>` allocates a node with room for eleven entries (about 550
//! bytes) even for one, and then each key and each value on its own. A `StrMap` holds the
//! number of entries and then every key and value, each after its length, back to back in one
//! `Box<str>`: one allocation, sized exactly, whatever the number of entries (a separate
//! table of where each ends cost every map a second allocation, 11,000 of them at 1000 x 5).
//! A length is written in ASCII bytes, six bits each, the seventh set on every byte but the
//! last: the text stays UTF-8 and a part shorter than 64 bytes costs one byte more. It is
//! built once (decoded, or collected) and read; it is not edited in place. Keys are sorted
//! and unique, as in a `BTreeMap`: two maps of the same entries are equal, and it is written
//! out as the same JSON object.

use std::{collections::BTreeMap, fmt};

use serde::{
    Deserialize, Deserializer, Serialize, Serializer,
    de::{MapAccess, Visitor},
    ser::SerializeMap,
};

/// Strings to strings, sorted by key, packed (see the module's documentation).
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct StrMap {
    /// The number of entries, then each key and each value after its length, in key order.
    text: Box<str>,
}

/// The bit of a length's byte that says another byte follows.
const MORE: u8 = 0x40;

/// Appends `n` as a length: six bits per ASCII byte, lowest first.
fn push_length(text: &mut String, mut n: usize) {
    loop {
        let low = (n & 0x3f) as u8;
        n >>= 6;
        if n == 0 {
            text.push(char::from(low));
            return;
        }
        text.push(char::from(low | MORE));
    }
}

/// How many bytes [`push_length`] writes for `n`: one for each six bits.
fn length_bytes(mut n: usize) -> usize {
    let mut bytes = 1;
    while n >= 64 {
        n >>= 6;
        bytes += 1;
    }
    bytes
}

/// The length at `*pos` of `bytes`, and `*pos` moved past it.
fn read_length(bytes: &[u8], pos: &mut usize) -> usize {
    let (mut n, mut shift) = (0usize, 0);
    while let Some(&b) = bytes.get(*pos) {
        *pos += 1;
        n |= usize::from(b & 0x3f) << shift;
        if b & MORE == 0 {
            break;
        }
        shift += 6;
    }
    n
}

/// The entries of a [`StrMap`], in key order.
#[derive(Clone)]
pub struct Entries<'a> {
    text: &'a str,
    pos: usize,
    left: usize,
}

impl<'a> Entries<'a> {
    fn part(&mut self) -> &'a str {
        let len = read_length(self.text.as_bytes(), &mut self.pos);
        let start = self.pos;
        self.pos += len;
        self.text.get(start..self.pos).unwrap_or_default()
    }
}

impl<'a> Iterator for Entries<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<(&'a str, &'a str)> {
        self.left = self.left.checked_sub(1)?;
        let key = self.part();
        Some((key, self.part()))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Entries<'_> {}

impl StrMap {
    /// How many entries.
    pub fn len(&self) -> usize {
        read_length(self.text.as_bytes(), &mut 0)
    }

    /// Whether there is no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The entries, in key order.
    pub fn iter(&self) -> Entries<'_> {
        let mut pos = 0;
        let left = read_length(self.text.as_bytes(), &mut pos);
        Entries {
            text: &self.text,
            pos,
            left,
        }
    }

    /// The keys, in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> + '_ {
        self.iter().map(|(k, _)| k)
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// Whether `key` has an entry.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Sets `key` to `value` (packed again: for the rare edit, not for building a map).
    pub fn insert(&mut self, key: String, value: String) {
        let mut map = self.to_map();
        map.insert(key, value);
        *self = StrMap::from(&map);
    }

    /// The entries as a `BTreeMap`, for code that edits them.
    pub fn to_map(&self) -> BTreeMap<String, String> {
        self.iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    /// Packs entries already sorted by key, without repeats.
    fn pack<'a>(sorted: impl Iterator<Item = (&'a str, &'a str)> + Clone) -> Self {
        let (mut length, mut count) = (0, 0);
        for (k, v) in sorted.clone() {
            length += length_bytes(k.len()) + k.len() + length_bytes(v.len()) + v.len();
            count += 1;
        }
        if count == 0 {
            return StrMap::default();
        }
        let mut text = String::with_capacity(length_bytes(count) + length);
        push_length(&mut text, count);
        for (k, v) in sorted {
            for part in [k, v] {
                push_length(&mut text, part.len());
                text.push_str(part);
            }
        }
        StrMap {
            text: text.into_boxed_str(),
        }
    }
}

impl<K: AsRef<str>, V: AsRef<str>> FromIterator<(K, V)> for StrMap {
    /// Collects entries in any order; of a key given twice the last value is kept, as a
    /// `BTreeMap` keeps it.
    fn from_iter<I: IntoIterator<Item = (K, V)>>(entries: I) -> Self {
        let mut entries: Vec<(K, V)> = entries.into_iter().collect();
        // stable: of equal keys the last given stays last
        entries.sort_by(|a, b| a.0.as_ref().cmp(b.0.as_ref()));
        let mut kept: Vec<(&str, &str)> = Vec::with_capacity(entries.len());
        for (k, v) in &entries {
            match kept.last_mut() {
                Some(last) if last.0 == k.as_ref() => last.1 = v.as_ref(),
                _ => kept.push((k.as_ref(), v.as_ref())),
            }
        }
        StrMap::pack(kept.iter().copied())
    }
}

impl From<BTreeMap<String, String>> for StrMap {
    fn from(map: BTreeMap<String, String>) -> Self {
        StrMap::pack(map.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    }
}

impl From<&BTreeMap<String, String>> for StrMap {
    fn from(map: &BTreeMap<String, String>) -> Self {
        StrMap::pack(map.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    }
}

impl<'a> IntoIterator for &'a StrMap {
    type Item = (&'a str, &'a str);
    type IntoIter = Entries<'a>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl fmt::Debug for StrMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Serialize for StrMap {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.len()))?;
        for (k, v) in self.iter() {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for StrMap {
    /// A JSON object of strings (`null` is the empty map).
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Entries;
        impl<'de> Visitor<'de> for Entries {
            type Value = StrMap;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of strings to strings")
            }
            fn visit_unit<E>(self) -> Result<StrMap, E> {
                Ok(StrMap::default())
            }
            fn visit_none<E>(self) -> Result<StrMap, E> {
                Ok(StrMap::default())
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<StrMap, D::Error> {
                d.deserialize_any(self)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<StrMap, A::Error> {
                let mut entries: Vec<(String, String)> = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    entries.push(entry);
                }
                Ok(entries.into_iter().collect())
            }
        }
        deserializer.deserialize_any(Entries)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    // R1, R4: a packed map reads, compares and writes out as the BTreeMap it replaces
    #[test]
    fn a_packed_map_is_a_sorted_map() {
        let map: StrMap = serde_json::from_value(json!({"b": "2", "a": "", "c": "three ✓"}))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(map.len(), 3);
        assert_eq!(
            map.iter().collect::<Vec<_>>(),
            [("a", ""), ("b", "2"), ("c", "three ✓")]
        );
        assert_eq!(map.get("b"), Some("2"));
        assert_eq!(map.get("a"), Some(""));
        assert_eq!(map.get("d"), None);
        assert_eq!(
            serde_json::to_value(&map).unwrap_or_default(),
            json!({"a": "", "b": "2", "c": "three ✓"})
        );
        let btree = map.to_map();
        assert_eq!(StrMap::from(&btree), map);
        assert_eq!(format!("{map:?}"), format!("{btree:?}"));
        // the last of a repeated key wins, as in a BTreeMap
        let repeated: StrMap = [("k", "1"), ("j", "0"), ("k", "2")].into_iter().collect();
        assert_eq!(
            repeated.iter().collect::<Vec<_>>(),
            [("j", "0"), ("k", "2")]
        );
        let empty: StrMap = serde_json::from_value(json!(null)).unwrap_or_default();
        assert!(empty.is_empty() && empty == StrMap::default());
        assert_eq!(empty.iter().count(), 0);
        assert!(serde_json::from_value::<StrMap>(json!({"a": 1})).is_err());
        assert!(serde_json::from_value::<StrMap>(json!(["a"])).is_err());
    }

    // R1, R4: lengths of every size read back (one byte below 64, more from there on)
    #[test]
    fn long_parts_keep_their_lengths() {
        for n in [0, 1, 63, 64, 65, 4095, 4096, 300_000] {
            let value = "é".repeat(n / 2) + &"x".repeat(n % 2);
            let map: StrMap = [("k", value.as_str()), ("a", "1")].into_iter().collect();
            assert_eq!(map.len(), 2);
            assert_eq!(map.get("k"), Some(value.as_str()));
            assert_eq!(map.iter().len(), 2);
            assert_eq!(map.iter().last(), Some(("k", value.as_str())));
        }
        let mut text = String::new();
        push_length(&mut text, 64);
        assert_eq!(text.as_bytes(), [MORE, 1]);
        assert_eq!(
            (length_bytes(63), length_bytes(64), length_bytes(4096)),
            (1, 2, 3)
        );
    }
}
