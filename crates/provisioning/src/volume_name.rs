//! PV / volume names (`--volume-name-prefix`, `--volume-name-uuid-length`).
//!
//! The name is both the CreateVolume idempotency key and the PV name, so it must be stable for a
//! claim and a valid object name.

use thiserror::Error;

use crate::validation::dns1123_subdomain_problem;

/// Longest UUID part: a UID without its dashes has 32 hex digits.
pub const MAX_UUID_LENGTH: i32 = 32;

/// Why no volume name could be made.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum VolumeNameError {
    /// `--volume-name-prefix` is empty.
    #[error("--volume-name-prefix must not be empty")]
    EmptyPrefix,
    /// `--volume-name-uuid-length` is neither -1 nor 1..=32.
    #[error(
        "--volume-name-uuid-length must be -1 (keep the whole claim UID) or between 1 and {MAX_UUID_LENGTH}, got {0}"
    )]
    BadUuidLength(i32),
    /// The claim has no UID (upstream's text).
    #[error("corrupted PVC object, it is missing UID")]
    MissingUid,
    /// The UID is shorter than the requested length once dashes are removed.
    #[error(
        "claim UID {uid:?} has {available} characters without dashes, fewer than --volume-name-uuid-length={length}"
    )]
    UidTooShort {
        /// The claim UID.
        uid: String,
        /// Characters left after removing dashes.
        available: usize,
        /// The configured length.
        length: i32,
    },
    /// The result is not a valid PersistentVolume name.
    #[error(
        "volume name {name:?} built from --volume-name-prefix={prefix:?} is not a valid PersistentVolume name: {problem}"
    )]
    InvalidName {
        /// The generated name.
        name: String,
        /// The configured prefix.
        prefix: String,
        /// What is wrong with it.
        problem: String,
    },
}

/// Checks the two flags on their own, so that bad values fail at startup rather than per claim.
pub fn validate_flags(prefix: &str, uuid_length: i32) -> Result<(), VolumeNameError> {
    if prefix.is_empty() {
        return Err(VolumeNameError::EmptyPrefix);
    }
    if uuid_length != -1 && !(1..=MAX_UUID_LENGTH).contains(&uuid_length) {
        return Err(VolumeNameError::BadUuidLength(uuid_length));
    }
    Ok(())
}

/// `<prefix>-<uid>` for `uuid_length == -1`, otherwise `<prefix>-<first N of the UID without
/// dashes>`.
///
/// Differs from upstream: the flags are validated instead of trusted (upstream panics for a
/// length above 32 or a short UID, and a length of 0 makes every claim share the name
/// `<prefix>-`), and the result must be a valid DNS-1123 subdomain of at most 253 characters.
pub fn make_volume_name(
    prefix: &str,
    claim_uid: &str,
    uuid_length: i32,
) -> Result<String, VolumeNameError> {
    validate_flags(prefix, uuid_length)?;
    if claim_uid.is_empty() {
        return Err(VolumeNameError::MissingUid);
    }
    let name = match usize::try_from(uuid_length) {
        Err(_) => format!("{prefix}-{claim_uid}"),
        Ok(length) => {
            let compact: Vec<char> = claim_uid.chars().filter(|c| *c != '-').collect();
            if compact.len() < length {
                return Err(VolumeNameError::UidTooShort {
                    uid: claim_uid.to_string(),
                    available: compact.len(),
                    length: uuid_length,
                });
            }
            let part: String = compact[..length].iter().collect();
            format!("{prefix}-{part}")
        }
    };
    match dns1123_subdomain_problem(&name) {
        None => Ok(name),
        Some(problem) => Err(VolumeNameError::InvalidName {
            name,
            prefix: prefix.to_string(),
            problem,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    const UID: &str = "0f1c2d3e-4a5b-6c7d-8e9f-a0b1c2d3e4f5";

    #[test]
    fn names() {
        let cases = [
            ("pvc", UID, -1, "pvc-0f1c2d3e-4a5b-6c7d-8e9f-a0b1c2d3e4f5"),
            ("pvc", UID, 32, "pvc-0f1c2d3e4a5b6c7d8e9fa0b1c2d3e4f5"),
            ("pvc", UID, 8, "pvc-0f1c2d3e"),
            ("pvc", UID, 1, "pvc-0"),
            ("my.volumes", UID, 4, "my.volumes-0f1c"),
        ];
        for (prefix, uid, length, want) in cases {
            assert_eq!(make_volume_name(prefix, uid, length).as_deref(), Ok(want));
        }
    }

    #[test]
    fn errors() {
        let long_prefix = "p".repeat(250);
        let cases = [
            ("", UID, -1, VolumeNameError::EmptyPrefix),
            ("pvc", UID, 0, VolumeNameError::BadUuidLength(0)),
            ("pvc", UID, 33, VolumeNameError::BadUuidLength(33)),
            ("pvc", UID, -2, VolumeNameError::BadUuidLength(-2)),
            ("pvc", "", -1, VolumeNameError::MissingUid),
            (
                "pvc",
                "ab-cd",
                8,
                VolumeNameError::UidTooShort {
                    uid: "ab-cd".into(),
                    available: 4,
                    length: 8,
                },
            ),
        ];
        for (prefix, uid, length, want) in cases {
            assert_eq!(make_volume_name(prefix, uid, length), Err(want));
        }
        for (prefix, uid) in [("PVC", UID), (long_prefix.as_str(), UID), ("pvc", "A_B")] {
            let err = make_volume_name(prefix, uid, -1).unwrap_err();
            assert!(matches!(err, VolumeNameError::InvalidName { .. }), "{err}");
            assert!(err.to_string().contains("--volume-name-prefix"), "{err}");
        }
    }

    #[test]
    fn messages_name_the_flags() {
        assert_eq!(
            VolumeNameError::BadUuidLength(40).to_string(),
            "--volume-name-uuid-length must be -1 (keep the whole claim UID) or between 1 and 32, got 40"
        );
        assert_eq!(validate_flags("pvc", -1), Ok(()));
        assert_eq!(validate_flags("", -1), Err(VolumeNameError::EmptyPrefix));
        assert_eq!(
            VolumeNameError::MissingUid.to_string(),
            "corrupted PVC object, it is missing UID"
        );
    }
}
