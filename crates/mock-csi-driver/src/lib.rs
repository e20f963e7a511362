//! `mock-csi-driver`: a CSI driver that tests, the demo and benchmarks run as a real process on
//! a unix socket. It serves Identity, Controller and the two Node RPCs a provisioner uses
//! (NodeGetInfo, NodeGetCapabilities), keeps its volumes in memory, and carves them out of
//! fixed-size pools that each sit in one topology segment. NodeUnpublishVolume and
//! NodeUnstageVolume are answered too (OK for a known volume, NOT_FOUND otherwise) because
//! csi-sanity calls them when cleaning up; nothing is ever published or staged.
//!
//! Every call runs to its end even when its caller goes away (a client deadline, a provisioner
//! killed mid-call), as a real driver's backend would: the volume is made and the call logged,
//! only the answer is lost.
//!
//! SIGTERM or SIGINT stops the driver: calls in flight get up to 5 s, idle client connections
//! are dropped, and the socket file is removed. A stale socket file is replaced at start.
//!
//! # Command line
//!
//! ```text
//! mock-csi-driver --endpoint unix:///path/to/csi.sock   (or a bare absolute path)
//!                 --driver-name NAME                     (default "mock.csi.test")
//!                 [--pool [KIND@]SEGMENT:SIZE]...        (default: one 1Pi pool, no segment)
//!                 [--max-volume-size SIZE]               GetCapacity maximum_volume_size, verbatim
//!                 [--node-id ID] [--node-topology k=v[,k=v]]   NodeGetInfo (default "mock-node")
//!                 [--faults FILE] [--call-log FILE]
//!                 [--publish-unpublish] [--single-node-multi-writer] [--modify-volume]
//!                 [--clone-volume [--omit-content-source]] [--restore-snapshots]
//!                 [--no-topology] [--no-capacity] [--overcommit]
//!                 [--volume-id-format FORMAT]            e.g. `vol-{seq}`; `{name}`, `{segment}` too
//! ```
//!
//! SEGMENT is `key=value[,key=value...]` or empty; SIZE is a Kubernetes quantity (`10Gi`,
//! `500M`, `1073741824`). KIND is matched against the `kind` parameter of CreateVolume and
//! GetCapacity (absent = ""). A bad flag prints one line naming the flag and the expected form
//! and exits with code 2. `RUST_LOG` sets the stderr log level (default `info`); the stderr log
//! shows method, gRPC code and duration only, never request contents.
//!
//! # Behaviour
//!
//! - Topology (VOLUME_ACCESSIBILITY_CONSTRAINTS) is advertised iff some pool has a segment and
//!   `--no-topology` is absent. Controller capabilities: CREATE_DELETE_VOLUME, LIST_VOLUMES,
//!   GET_CAPACITY (unless `--no-capacity`; GetCapacity then answers UNIMPLEMENTED) and the
//!   optional flags. PUBLISH_UNPUBLISH_VOLUME is advertised only: the `csi` crate's proto has
//!   no ControllerPublishVolume, so such calls get UNIMPLEMENTED.
//! - CreateVolume size: `required_bytes`, or 1 GiB when 0, capped by `limit_bytes`. Placement
//!   tries the `preferred` terms in order, then `requisite`; a pool matches a term when its
//!   segment has every key/value of the term; within a term pools are tried in command-line
//!   order and the first with room wins. No room: RESOURCE_EXHAUSTED naming the size asked and
//!   the largest free space among matching pools. A `kind` that no pool has: INVALID_ARGUMENT.
//!   With `--overcommit` (thin pools) the first matching pool takes the volume even without
//!   room; a pool's free space never reads below 0.
//!   The same name again returns the same volume if its size fits the new range and the kind
//!   is the same, else ALREADY_EXISTS. Volume ids are `mock-vol-<n>` (or `--volume-id-format`); `volume_context` holds
//!   `kind` and `pool` (the pool's index); `accessible_topology` is the pool's segment.
//! - Cloning: with `--clone-volume` CLONE_VOLUME is advertised and CreateVolume accepts a
//!   `volume_content_source` of type `volume`. An unknown source volume id gives NOT_FOUND;
//!   otherwise the clone is placed and sized like any new volume (its request's range, kind
//!   and topology, not the source's) and the response's `content_source` is the request's.
//!   Without the flag a volume source gives INVALID_ARGUMENT ("cloning is not supported").
//!   The same name again must also name the same source (or none, as before), else
//!   ALREADY_EXISTS; the name is looked up first, so a retry answers even after its source
//!   was deleted. ListVolumes shows each clone's `content_source`, so tests can see what a
//!   volume was cloned from. `--omit-content-source` (needs `--clone-volume`) is a broken
//!   driver: clones are made but CreateVolume answers without `content_source`; ListVolumes
//!   still has it.
//! - Restores: with `--restore-snapshots` CREATE_DELETE_SNAPSHOT is advertised (advertised
//!   only: the mock takes no snapshots, tests make the snapshot objects by hand) and any
//!   non-empty `snapshot_id` is taken as a source, placed, sized and echoed like a clone's,
//!   with the same rule for the same name again. Without the flag a snapshot source gives
//!   INVALID_ARGUMENT ("snapshots are not supported").
//! - One call per volume at a time, as the CSI spec asks of a plugin: a CreateVolume (by
//!   name) or DeleteVolume (by the volume's name, else its id) while another is pending for
//!   the same volume answers ABORTED at once, without using up a fault.
//! - ListVolumes tokens are creation numbers: deleting volumes between pages is harmless and
//!   a token the driver never issued gives ABORTED. `--max-volume-size` is not enforced by
//!   CreateVolume; it is only reported.
//!
//! # Socket outage
//!
//! SIGUSR1 takes the socket away for `--socket-outage-ms` (default 20 s): calls in flight
//! finish, connections are dropped, the socket file is removed; then it is served again with
//! the same volumes (a driver container restarting while its backend keeps the data).
//!
//! # Faults file (`--faults FILE`)
//!
//! ```json
//! {"CreateVolume": {"code": "Unavailable", "message": "try later", "delay_ms": 5000, "times": 3},
//!  "GetCapacity":  {"delay_ms": 200}}
//! ```
//!
//! Keys are RPC method names (`CreateVolume`, `DeleteVolume`, `GetCapacity`, `ListVolumes`,
//! `ValidateVolumeCapabilities`, `ControllerGetCapabilities`, `ControllerModifyVolume`,
//! `GetPluginInfo`, `GetPluginCapabilities`, `Probe`, `NodeGetInfo`, `NodeGetCapabilities`,
//! `NodeUnpublishVolume`, `NodeUnstageVolume`).
//! All fields are optional: `delay_ms` sleeps before handling (with `delay_max_ms`, a uniformly
//! random time between the two, drawn per call); `code` (a Go gRPC code name such
//! as `ResourceExhausted`, or `RESOURCE_EXHAUSTED`; `OK` = no error) fails the call with
//! `message` (default "injected fault for METHOD"); without `code` the call is then handled
//! normally. `times` limits the fault to the next N calls of that method; absent means every
//! call. `probability` (0 to 1) applies the fault to that share of the calls, drawn per call;
//! a call it skips is treated as if the entry were not there. The file is checked on every call and re-read when its mtime, size or inode changed;
//! a change resets the `times` counters.
//!
//! A method may also have a list of faults; each call takes the first entry that matches and
//! has calls left (each entry counts its own `times`). `match_parameters` (`{"k": "v"}`)
//! limits an entry to calls whose request `parameters` hold all those pairs (CreateVolume,
//! GetCapacity, ValidateVolumeCapabilities; never other methods), so one StorageClass
//! parameter can steer one test case. `reply` makes a driver that lies: the call is handled
//! normally (a volume really is created, sized as asked), then the named fields of the
//! successful answer are replaced before it is sent and logged. CreateVolume takes
//! `volume_id`, `capacity_bytes`, `accessible_topology` (a list of `{"key": "value"}`
//! segments, replacing the real one) and `volume_context` (keys added or replaced);
//! GetCapacity takes `available_capacity` and `maximum_volume_size`. A `reply` together with
//! an error `code`, or a field of another method's answer, makes the file invalid:
//!
//! ```json
//! {"CreateVolume": [
//!    {"match_parameters": {"case": "small"}, "reply": {"capacity_bytes": 1}, "times": 1},
//!    {"match_parameters": {"case": "no-id"}, "reply": {"volume_id": ""}}],
//!  "GetCapacity": {"reply": {"available_capacity": -1}}}
//! ``` A missing or empty file means no faults. A file that
//! does not parse (bad JSON, unknown method or code, unknown field) is reported on stderr and
//! the previous faults stay in force; write to a temporary file and rename it over the faults
//! file to change it atomically.
//!
//! # Call log (`--call-log FILE`)
//!
//! The file is opened for appending; each finished call adds one line:
//!
//! ```json
//! {"time":"2025-01-02T03:04:05.678Z","method":"CreateVolume","duration_ms":1,
//!  "request":{"name":"pvc-1","secrets":{"k":"v"}},"response":{"volume":{"capacity_bytes":1073741824,"volume_id":"mock-vol-0"}}}
//! {"time":"...","method":"GetCapacity","duration_ms":0,"request":{},
//!  "error":{"code":"ResourceExhausted","message":"..."}}
//! ```
//!
//! `time` is when the call arrived (RFC 3339, UTC, milliseconds); lines are written when calls
//! finish, so concurrent calls may appear out of `time` order. Requests and responses are
//! protobuf JSON with the proto field names (`capacity_bytes`), 64-bit integers as JSON numbers,
//! enums by name, and fields at their default value left out. Secrets are recorded as sent.

// No unsafe code here: `forbid`, unlike the workspace's `deny`, cannot be allowed again below.
#![forbid(unsafe_code)]

pub mod calllog;
pub mod cli;
pub mod codes;
pub mod faults;
pub mod handlers;
pub mod node_cleanup;
pub mod pools;

pub mod server;
pub mod service;
pub mod spec;

pub use cli::{Config, parse_args};
pub use handlers::DriverConfig;
pub use pools::Pools;
pub use server::{ServeError, driver, serve};
pub use service::MockDriver;
