//! The driver's storage: pools with a fixed size, and the volumes carved out of them.
//!
//! Everything here is plain data and plain methods so that allocation, capacity and pagination
//! can be table-tested without gRPC.

use std::collections::{BTreeMap, HashMap};

use thiserror::Error;

use crate::spec::{PoolSpec, Segment};

/// Size of a volume whose request gives no `required_bytes`: 1 GiB (capped by `limit_bytes`).
pub const DEFAULT_VOLUME_SIZE: i64 = 1 << 30;

/// A volume that exists in the driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Volume {
    pub id: String,
    pub name: String,
    pub kind: String,
    /// Index of the pool in command-line order.
    pub pool: usize,
    pub capacity: i64,
    /// The pool's segment; empty when the pool has no topology.
    pub segment: Segment,
    /// Last parameters given by ControllerModifyVolume (or CreateVolume).
    pub mutable_parameters: BTreeMap<String, String>,
    /// What this volume was filled from; `None` for an empty volume.
    pub source: Option<Source>,
    /// Creation order; ListVolumes tokens point into it.
    seq: u64,
}

impl Volume {
    /// The `volume_context` returned for this volume.
    pub fn context(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("kind".to_owned(), self.kind.clone()),
            ("pool".to_owned(), self.pool.to_string()),
        ])
    }
}

/// What CreateVolume asks of the pools, already taken out of the CSI request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CreateRequest {
    pub name: String,
    pub kind: String,
    pub required_bytes: i64,
    pub limit_bytes: i64,
    /// Placement terms in order of preference.
    pub preferred: Vec<Segment>,
    /// Terms the volume must satisfy (one of them); tried after `preferred`.
    pub requisite: Vec<Segment>,
    pub mutable_parameters: BTreeMap<String, String>,
    /// What to fill the volume from; `None` for an empty volume.
    pub source: Option<Source>,
}

/// What a volume is filled from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A clone of the volume with this id (which must exist).
    Volume(String),
    /// A restore of the snapshot with this id. The mock keeps no snapshots: any id is taken,
    /// as a driver whose snapshots live outside it.
    Snapshot(String),
}

/// How an error message names a volume's source.
fn describe_source(source: &Option<Source>) -> String {
    match source {
        Some(Source::Volume(id)) => format!("cloned from {id:?}"),
        Some(Source::Snapshot(id)) => format!("restored from snapshot {id:?}"),
        None => "empty (no source)".to_owned(),
    }
}

/// Why a pool operation failed. Each variant maps to one gRPC code in the service layer.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PoolError {
    #[error(
        "capacity range is invalid: required_bytes={required}, limit_bytes={limit} (both must be >= 0 and required <= limit when limit is set)"
    )]
    InvalidRange { required: i64, limit: i64 },
    #[error(
        "volume {name:?} already exists with {capacity} bytes of kind {kind:?}, incompatible with required_bytes={required}, limit_bytes={limit}, kind {asked_kind:?}"
    )]
    AlreadyExists {
        name: String,
        capacity: i64,
        kind: String,
        required: i64,
        limit: i64,
        asked_kind: String,
    },
    // Not named `source`: thiserror would take such a field for the error's cause.
    #[error(
        "volume {name:?} already exists {}, incompatible with a request for a volume {}",
        describe_source(existing_source),
        describe_source(asked_source)
    )]
    SourceMismatch {
        name: String,
        existing_source: Option<Source>,
        asked_source: Option<Source>,
    },
    #[error("source volume {0:?} does not exist")]
    SourceNotFound(String),
    #[error(
        "no pool has kind {kind:?} (set the `kind` parameter to a kind given with --pool KIND@...)"
    )]
    UnknownKind { kind: String },
    #[error("no pool of kind {kind:?} matches the accessibility requirements")]
    NoMatchingPool { kind: String },
    #[error(
        "not enough space for {size} bytes: the largest free space among matching pools is {largest_free} bytes"
    )]
    Exhausted { size: i64, largest_free: i64 },
    #[error("starting_token {0:?} was not issued by this driver")]
    InvalidToken(String),
    #[error("max_entries must not be negative, got {0}")]
    NegativeMaxEntries(i32),
    #[error("volume {0:?} does not exist")]
    NotFound(String),
}

#[derive(Debug, Clone)]
struct Pool {
    spec: PoolSpec,
    used: i64,
}

impl Pool {
    fn free(&self) -> i64 {
        (self.spec.size - self.used).max(0)
    }
}

/// All pools and volumes of one driver process.
#[derive(Debug, Clone)]
pub struct Pools {
    pools: Vec<Pool>,
    volumes: BTreeMap<u64, Volume>,
    by_name: HashMap<String, u64>,
    by_id: HashMap<String, u64>,
    /// `--volume-id-format`: how volume ids look (`None`: `mock-vol-<n>`).
    id_format: Option<String>,
    next_seq: u64,
    /// Thin pools: a matching pool takes a volume even without room.
    overcommit: bool,
}

/// Whether `segment` has every key/value pair of `term` (an empty term matches everything).
pub fn segment_contains(segment: &Segment, term: &Segment) -> bool {
    term.iter().all(|(k, v)| segment.get(k) == Some(v))
}

/// The size to allocate for a capacity range, or why the range is invalid.
pub fn volume_size(required: i64, limit: i64) -> Result<i64, PoolError> {
    if required < 0 || limit < 0 || (limit > 0 && required > limit) {
        return Err(PoolError::InvalidRange { required, limit });
    }
    let size = if required > 0 {
        required
    } else {
        DEFAULT_VOLUME_SIZE
    };
    Ok(if limit > 0 { size.min(limit) } else { size })
}

/// A new volume's id: `mock-vol-<seq>`, or `format` with `{seq}`, `{name}` and `{segment}`
/// (the pool segment's values joined by `_`) replaced. Tests of CSI migration need ids in a
/// cloud driver's shape, which the in-tree translation parses.
pub fn volume_id(format: Option<&str>, seq: u64, name: &str, segment: &Segment) -> String {
    let Some(format) = format else {
        return format!("mock-vol-{seq}");
    };
    let values: Vec<&str> = segment.values().map(String::as_str).collect();
    format
        .replace("{seq}", &seq.to_string())
        .replace("{name}", name)
        .replace("{segment}", &values.join("_"))
}

/// Placement terms in the order they are tried: preferred, then requisite; none means anywhere.
pub fn placement_terms(preferred: &[Segment], requisite: &[Segment]) -> Vec<Segment> {
    if preferred.is_empty() && requisite.is_empty() {
        return vec![Segment::new()];
    }
    preferred.iter().chain(requisite).cloned().collect()
}

impl Pools {
    pub fn new(specs: Vec<PoolSpec>) -> Self {
        Self {
            pools: specs
                .into_iter()
                .map(|spec| Pool { spec, used: 0 })
                .collect(),
            volumes: BTreeMap::new(),
            by_name: HashMap::new(),
            by_id: HashMap::new(),
            next_seq: 0,
            overcommit: false,
            id_format: None,
        }
    }

    /// Over-committed thin pools (`--overcommit`): placement ignores free space, so a pool's
    /// volumes may add up to more than its size (its free space then reads 0).
    pub fn with_overcommit(mut self, overcommit: bool) -> Self {
        self.overcommit = overcommit;
        self
    }

    /// Volume ids shaped like a real driver's (`--volume-id-format`), see [`volume_id`].
    pub fn with_id_format(mut self, format: Option<String>) -> Self {
        self.id_format = format;
        self
    }

    /// Whether any pool has a topology segment (then the driver advertises topology).
    pub fn has_topology(&self) -> bool {
        self.pools.iter().any(|p| !p.spec.segment.is_empty())
    }

    /// Creates a volume, or returns the existing one of the same name if it is compatible.
    /// The boolean says whether the volume already existed.
    pub fn create(&mut self, req: &CreateRequest) -> Result<(Volume, bool), PoolError> {
        let size = volume_size(req.required_bytes, req.limit_bytes)?;
        if let Some(existing) = self
            .by_name
            .get(&req.name)
            .and_then(|s| self.volumes.get(s))
        {
            let fits = existing.capacity >= req.required_bytes
                && (req.limit_bytes == 0 || existing.capacity <= req.limit_bytes);
            if fits && existing.kind == req.kind {
                if existing.source != req.source {
                    return Err(PoolError::SourceMismatch {
                        name: req.name.clone(),
                        existing_source: existing.source.clone(),
                        asked_source: req.source.clone(),
                    });
                }
                return Ok((existing.clone(), true));
            }
            return Err(PoolError::AlreadyExists {
                name: req.name.clone(),
                capacity: existing.capacity,
                kind: existing.kind.clone(),
                required: req.required_bytes,
                limit: req.limit_bytes,
                asked_kind: req.kind.clone(),
            });
        }
        // Checked after the name so that a retry still answers after its source is deleted.
        if let Some(Source::Volume(source)) = &req.source
            && !self.by_id.contains_key(source)
        {
            return Err(PoolError::SourceNotFound(source.clone()));
        }
        let index = self.choose_pool(&req.kind, size, &req.preferred, &req.requisite)?;
        let seq = self.next_seq;
        self.next_seq += 1;
        let pool = &mut self.pools[index];
        pool.used += size;
        let volume = Volume {
            id: volume_id(
                self.id_format.as_deref(),
                seq,
                &req.name,
                &pool.spec.segment,
            ),
            name: req.name.clone(),
            kind: req.kind.clone(),
            pool: index,
            capacity: size,
            segment: pool.spec.segment.clone(),
            mutable_parameters: req.mutable_parameters.clone(),
            source: req.source.clone(),
            seq,
        };
        self.by_name.insert(volume.name.clone(), seq);
        self.by_id.insert(volume.id.clone(), seq);
        self.volumes.insert(seq, volume.clone());
        Ok((volume, false))
    }

    /// The first pool (terms in order, pools in command-line order) of `kind` with room.
    fn choose_pool(
        &self,
        kind: &str,
        size: i64,
        preferred: &[Segment],
        requisite: &[Segment],
    ) -> Result<usize, PoolError> {
        if !self.pools.iter().any(|p| p.spec.kind == kind) {
            return Err(PoolError::UnknownKind {
                kind: kind.to_owned(),
            });
        }
        let mut largest_free = None;
        for term in placement_terms(preferred, requisite) {
            for (index, pool) in self.pools.iter().enumerate() {
                if pool.spec.kind != kind || !segment_contains(&pool.spec.segment, &term) {
                    continue;
                }
                if self.overcommit || pool.free() >= size {
                    return Ok(index);
                }
                largest_free = largest_free.max(Some(pool.free()));
            }
        }
        match largest_free {
            Some(largest_free) => Err(PoolError::Exhausted { size, largest_free }),
            None => Err(PoolError::NoMatchingPool {
                kind: kind.to_owned(),
            }),
        }
    }

    /// Deletes a volume and frees its space; `None` if the id is unknown.
    pub fn delete(&mut self, id: &str) -> Option<Volume> {
        let seq = self.by_id.remove(id)?;
        let volume = self.volumes.remove(&seq)?;
        self.by_name.remove(&volume.name);
        if let Some(pool) = self.pools.get_mut(volume.pool) {
            pool.used -= volume.capacity;
        }
        Some(volume)
    }

    pub fn get(&self, id: &str) -> Option<&Volume> {
        self.by_id.get(id).and_then(|seq| self.volumes.get(seq))
    }

    /// Replaces the mutable parameters of a volume (ControllerModifyVolume).
    pub fn modify(
        &mut self,
        id: &str,
        params: BTreeMap<String, String>,
    ) -> Result<&Volume, PoolError> {
        let volume = self
            .by_id
            .get(id)
            .and_then(|seq| self.volumes.get_mut(seq))
            .ok_or_else(|| PoolError::NotFound(id.to_owned()))?;
        volume.mutable_parameters.extend(params);
        Ok(volume)
    }

    /// Free bytes of `kind`: all pools when `segment` is `None`, else the pools whose segment
    /// contains it.
    pub fn capacity(&self, kind: &str, segment: Option<&Segment>) -> i64 {
        self.pools
            .iter()
            .filter(|p| p.spec.kind == kind)
            .filter(|p| segment.is_none_or(|s| segment_contains(&p.spec.segment, s)))
            .fold(0i64, |sum, p| sum.saturating_add(p.free()))
    }

    /// One page of volumes in creation order and the token of the next page, if any.
    ///
    /// A token is the creation number to resume at, so deleting volumes between pages never
    /// invalidates it and volumes created meanwhile show up on a later page.
    pub fn list(
        &self,
        max_entries: i32,
        starting_token: &str,
    ) -> Result<(Vec<&Volume>, Option<String>), PoolError> {
        let max =
            usize::try_from(max_entries).map_err(|_| PoolError::NegativeMaxEntries(max_entries))?;
        let start = if starting_token.is_empty() {
            0
        } else {
            starting_token
                .parse::<u64>()
                .ok()
                .filter(|t| *t <= self.next_seq)
                .ok_or_else(|| PoolError::InvalidToken(starting_token.to_owned()))?
        };
        let mut rest = self.volumes.range(start..).map(|(_, v)| v);
        let page: Vec<&Volume> = if max == 0 {
            rest.by_ref().collect()
        } else {
            rest.by_ref().take(max).collect()
        };
        let next = match (rest.next(), page.last()) {
            (Some(_), Some(last)) => Some((last.seq + 1).to_string()),
            _ => None,
        };
        Ok((page, next))
    }
}

#[cfg(test)]
mod tests;
