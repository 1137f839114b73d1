//! [`StrMap`]: a small map of strings to strings (a variant's `env`, a cached object's labels)
//! packed into one text, for objects the caches hold by the thousand.
//!
//! A `BTreeMap<String, String>` allocates a node with room for eleven entries (about 550
//! bytes) even for one, and then each key and each value on its own. A `StrMap` holds every
//! key and value back to back in one `Box<str>` and where each ends in one `Box<[u32]>`: two
//! allocations, sized exactly, whatever the number of entries. It is built once (decoded, or
//! collected) and read; it is not edited in place. Keys are sorted and unique, as in a
//! `BTreeMap`: two maps of the same entries are equal, and it is written out as the same JSON
//! object.

use std::{collections::BTreeMap, fmt};

use serde::{
    Deserialize, Deserializer, Serialize, Serializer,
    de::{MapAccess, Visitor},
    ser::SerializeMap,
};

/// Strings to strings, sorted by key, packed (see the module's documentation).
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct StrMap {
    /// Every key and value, in key order: `k0 v0 k1 v1 ...`.
    text: Box<str>,
    /// The end of each key and each value in `text`, in the same order.
    ends: Box<[u32]>,
}

impl StrMap {
    /// How many entries.
    pub fn len(&self) -> usize {
        self.ends.len() / 2
    }

    /// Whether there is no entry.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The entries, in key order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &str)> + Clone + '_ {
        self.ends.chunks_exact(2).enumerate().map(|(i, pair)| {
            let start = match i.checked_sub(1).and_then(|j| self.ends.get(2 * j + 1)) {
                Some(&end) => end as usize,
                None => 0,
            };
            let (key_end, value_end) = match *pair {
                [k, v] => (k as usize, v as usize),
                _ => (start, start),
            };
            let key = self.text.get(start..key_end).unwrap_or_default();
            let value = self.text.get(key_end..value_end).unwrap_or_default();
            (key, value)
        })
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
            length += k.len() + v.len();
            count += 2;
        }
        let mut text = String::with_capacity(length);
        let mut ends = Vec::with_capacity(count);
        for (k, v) in sorted {
            for part in [k, v] {
                text.push_str(part);
                // A map longer than 4 GiB is never decoded (the API server's limit is 3 MiB).
                ends.push(u32::try_from(text.len()).unwrap_or(u32::MAX));
            }
        }
        StrMap {
            text: text.into_boxed_str(),
            ends: ends.into_boxed_slice(),
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
    type IntoIter = Box<dyn Iterator<Item = (&'a str, &'a str)> + 'a>;

    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
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
}
