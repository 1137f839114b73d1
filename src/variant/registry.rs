//! The devices of a Mutation as Secret `<name>-devices` keeps them (R39), pure: per device the
//! SHA-256 of its token (never the token), its variant and when it enrolled; the variants that
//! enrollment made; and the token check against those hashes. No I/O.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::ByteString;

use crate::crd::{DeviceState, DeviceStatus, Reported};

/// Prefix of a device's key in Secret `<name>-devices`.
pub const DEVICE_KEY_PREFIX: &str = "device.";
/// Key of Secret `<name>-devices` that lists the variants enrollment made.
pub const MADE_KEY: &str = "made-variants";

/// The name of Mutation `name`'s devices Secret.
pub fn devices_secret_name(name: &str) -> String {
    [name, "-devices"].concat()
}

/// The SHA-256 of a token: all that is ever stored of a device's token.
pub fn token_hash(token: &str) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::with_capacity(64), |mut out, b| {
        out.push(char::from_digit(u32::from(b >> 4), 16).unwrap_or('0'));
        out.push(char::from_digit(u32::from(b & 0xf), 16).unwrap_or('0'));
        out
    })
}

fn unhex(text: &str) -> Option<[u8; 32]> {
    let bytes = text.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in bytes.chunks(2).enumerate() {
        let digit = |c: u8| char::from(c).to_digit(16);
        let (hi, lo) = (digit(pair[0])?, digit(pair[1])?);
        out[i] = u8::try_from(hi * 16 + lo).ok()?;
    }
    Some(out)
}

/// One device as Secret `<name>-devices` keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceRecord {
    /// SHA-256 of its token.
    pub hash: [u8; 32],
    /// The label of its variant.
    pub variant: String,
    /// When it enrolled (RFC 3339).
    pub enrolled_at: String,
}

impl DeviceRecord {
    /// The status entry of device `id` as it enrolled: Online, last seen when it enrolled.
    pub fn entry(&self, id: &str) -> DeviceStatus {
        DeviceStatus {
            id: id.to_owned(),
            variant: self.variant.clone(),
            enrolled_at: self.enrolled_at.clone(),
            last_seen: self.enrolled_at.clone(),
            state: DeviceState::Online,
            reported: Reported::default(),
            poll: None,
        }
    }
}

/// The devices of a Mutation as Secret `<name>-devices` keeps them: key `device.<id>` holds
/// `<sha256 hex> <variant> <enrolledAt>`, key `made-variants` the labels (comma-separated) of
/// the variants enrollment made, which go when their last device goes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Registry {
    /// The devices, by id.
    pub devices: BTreeMap<String, DeviceRecord>,
    /// The variants enrollment made.
    pub made: BTreeSet<String>,
}

impl Registry {
    /// Reads a devices Secret's data; entries that do not parse are left out.
    pub fn from_data(data: &BTreeMap<String, ByteString>) -> Registry {
        let mut registry = Registry::default();
        for (key, value) in data {
            let Ok(text) = std::str::from_utf8(&value.0) else {
                continue;
            };
            if key == MADE_KEY {
                registry.made = text
                    .split(',')
                    .filter(|l| !l.is_empty())
                    .map(str::to_owned)
                    .collect();
            } else if let Some(id) = key.strip_prefix(DEVICE_KEY_PREFIX) {
                let mut parts = text.split(' ');
                let (Some(hash), Some(variant), Some(enrolled_at), None) =
                    (parts.next(), parts.next(), parts.next(), parts.next())
                else {
                    continue;
                };
                if let Some(hash) = unhex(hash) {
                    registry.devices.insert(
                        id.to_owned(),
                        DeviceRecord {
                            hash,
                            variant: variant.to_owned(),
                            enrolled_at: enrolled_at.to_owned(),
                        },
                    );
                }
            }
        }
        registry
    }

    /// The Secret's data for this registry.
    pub fn to_data(&self) -> BTreeMap<String, ByteString> {
        let mut data: BTreeMap<String, ByteString> = self
            .devices
            .iter()
            .map(|(id, r)| {
                let value = format!("{} {} {}", hex(&r.hash), r.variant, r.enrolled_at);
                (
                    format!("{DEVICE_KEY_PREFIX}{id}"),
                    ByteString(value.into_bytes()),
                )
            })
            .collect();
        if !self.made.is_empty() {
            let made = self.made.iter().cloned().collect::<Vec<_>>().join(",");
            data.insert(MADE_KEY.to_owned(), ByteString(made.into_bytes()));
        }
        data
    }

    /// How many devices use variant `label`.
    pub fn users_of(&self, label: &str) -> usize {
        self.devices.values().filter(|r| r.variant == label).count()
    }
}

/// The devices of a registry by the hashes of their tokens (R39), sorted: built once when the
/// cache takes a devices Secret, so that the token check of each request of a device is a
/// binary search, not a comparison with every device of its Mutation (500 with `maxDevices`).
/// A search's time says where the SHA-256 of the token sent falls among the stored hashes;
/// a stored hash is no credential (a token is, and it is not found from its hash), and the
/// hash found is compared in constant time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ByHash(Box<[([u8; 32], Box<str>)]>);

impl ByHash {
    /// The index of `registry`'s devices.
    pub fn of(registry: &Registry) -> ByHash {
        let mut index: Vec<([u8; 32], Box<str>)> = registry
            .devices
            .iter()
            .map(|(id, record)| (record.hash, Box::from(id.as_str())))
            .collect();
        index.sort_unstable_by_key(|(hash, _)| *hash);
        ByHash(index.into_boxed_slice())
    }

    /// The id of the device whose token is `token`.
    pub fn device_of(&self, token: &str) -> Option<&str> {
        let hash = token_hash(token);
        let at = self.0.binary_search_by(|(h, _)| h.cmp(&hash)).ok()?;
        let (found, id) = self.0.get(at)?;
        constant_time_eq(found, &hash).then_some(&**id)
    }
}

/// Whether `a` and `b` are equal, in time that depends only on their lengths (R20): every
/// byte is looked at whatever the first difference, eight at a time, and the compiler is kept
/// from stopping at the first difference it could see. The lengths of tokens and hashes are
/// no secret (fixed by their format).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let (a_words, a_rest) = a.as_chunks::<8>();
    let (b_words, b_rest) = b.as_chunks::<8>();
    let mut diff = 0u64;
    for (x, y) in a_words.iter().zip(b_words) {
        diff |= std::hint::black_box(u64::from_ne_bytes(*x) ^ u64::from_ne_bytes(*y));
    }
    for (x, y) in a_rest.iter().zip(b_rest) {
        diff |= std::hint::black_box(u64::from(x ^ y));
    }
    std::hint::black_box(diff) == 0
}
