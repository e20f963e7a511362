//! The pprof `profile.proto` (package `perftools.profiles`) messages a CPU profile needs,
//! and the pure conversion of sampled stacks into one, shaped like Go's CPU profiles:
//! sample types `samples/count` and `cpu/nanoseconds`, period type `cpu/nanoseconds`.

use std::collections::HashMap;

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Profile {
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    #[prost(int64, tag = "12")]
    pub period: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ValueType {
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Sample {
    /// Leaf first.
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Label {
    #[prost(int64, tag = "1")]
    pub key: i64,
    #[prost(int64, tag = "2")]
    pub str: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Location {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Innermost inlined function first, the caller it was inlined into last.
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Line {
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    #[prost(int64, tag = "2")]
    pub line: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Function {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(int64, tag = "2")]
    pub name: i64,
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    #[prost(int64, tag = "4")]
    pub filename: i64,
}

/// One resolved symbol of a frame.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Symbol {
    /// Demangled name.
    pub name: String,
    /// Mangled name.
    pub system_name: String,
    pub file: String,
    pub line: i64,
}

/// One distinct stack and how often it was sampled.
#[derive(Debug, Clone)]
pub(crate) struct Stack {
    pub thread: String,
    /// Leaf first; each frame holds its inlined symbols, innermost first.
    pub frames: Vec<Vec<Symbol>>,
    pub count: i64,
}

/// When and how often the stacks were sampled.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    pub start_unix_nanos: i64,
    pub duration_nanos: i64,
    pub frequency_hz: i64,
}

/// Drops the profiler's own frames (the unwinder and the signal handler) from the leaf end.
pub(crate) fn trim_profiler_frames(frames: &mut Vec<Vec<Symbol>>) {
    let own = |frame: &Vec<Symbol>| {
        frame.iter().any(|s| {
            ["backtrace::", "pprof::", "<pprof::"]
                .iter()
                .any(|p| s.name.starts_with(p))
        })
    };
    let keep_from = frames.iter().position(|f| !own(f)).unwrap_or(frames.len());
    frames.drain(..keep_from);
}

#[derive(Default)]
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Self {
        let mut s = Strings::default();
        s.get(""); // the table must start with ""
        s
    }
    fn get(&mut self, value: &str) -> i64 {
        if let Some(i) = self.index.get(value) {
            return *i;
        }
        let i = self.table.len() as i64;
        self.table.push(value.to_string());
        self.index.insert(value.to_string(), i);
        i
    }
}

/// Builds the profile: functions and locations deduplicated, ids from 1, every sample
/// labelled with its thread.
pub(crate) fn build(stacks: &[Stack], timing: Timing) -> Profile {
    let mut strings = Strings::new();
    let period = 1_000_000_000 / timing.frequency_hz.max(1);
    let value_type = |strings: &mut Strings, t: &str, u: &str| ValueType {
        r#type: strings.get(t),
        unit: strings.get(u),
    };
    let sample_type = vec![
        value_type(&mut strings, "samples", "count"),
        value_type(&mut strings, "cpu", "nanoseconds"),
    ];
    let period_type = Some(value_type(&mut strings, "cpu", "nanoseconds"));
    let thread_key = strings.get("thread");

    let mut functions: Vec<Function> = Vec::new();
    let mut function_ids: HashMap<(i64, i64, i64), u64> = HashMap::new();
    let mut locations: Vec<Location> = Vec::new();
    let mut location_ids: HashMap<Vec<(u64, i64)>, u64> = HashMap::new();
    let mut samples = Vec::with_capacity(stacks.len());
    for stack in stacks {
        let mut location_id = Vec::with_capacity(stack.frames.len());
        for frame in &stack.frames {
            let mut lines = Vec::with_capacity(frame.len());
            for symbol in frame {
                let key = (
                    strings.get(&symbol.name),
                    strings.get(&symbol.system_name),
                    strings.get(&symbol.file),
                );
                let next = functions.len() as u64 + 1;
                let id = *function_ids.entry(key).or_insert_with(|| {
                    functions.push(Function {
                        id: next,
                        name: key.0,
                        system_name: key.1,
                        filename: key.2,
                    });
                    next
                });
                lines.push((id, symbol.line));
            }
            let next = locations.len() as u64 + 1;
            let id = *location_ids.entry(lines.clone()).or_insert_with(|| {
                locations.push(Location {
                    id: next,
                    line: lines
                        .iter()
                        .map(|&(function_id, line)| Line { function_id, line })
                        .collect(),
                });
                next
            });
            location_id.push(id);
        }
        samples.push(Sample {
            location_id,
            value: vec![stack.count, stack.count.saturating_mul(period)],
            label: vec![Label {
                key: thread_key,
                str: strings.get(&stack.thread),
            }],
        });
    }
    Profile {
        sample_type,
        sample: samples,
        location: locations,
        function: functions,
        string_table: strings.table,
        time_nanos: timing.start_unix_nanos,
        duration_nanos: timing.duration_nanos,
        period_type,
        period,
    }
}

#[cfg(test)]
mod tests {
    use prost::Message as _;

    use super::*;

    fn sym(name: &str, line: i64) -> Symbol {
        Symbol {
            name: name.into(),
            system_name: format!("_ZN{name}"),
            file: "src/x.rs".into(),
            line,
        }
    }

    #[test]
    fn trims_only_leading_profiler_frames() {
        let mut frames = vec![
            vec![
                sym("backtrace::trace", 1),
                sym("backtrace::trace_unsynchronized", 2),
            ],
            vec![sym(
                "<pprof::backtrace::Trace as pprof::backtrace::Trace>::trace",
                3,
            )],
            vec![sym("app::busy", 4)],
            vec![sym("pprof::later", 5)],
        ];
        trim_profiler_frames(&mut frames);
        assert_eq!(
            frames,
            [vec![sym("app::busy", 4)], vec![sym("pprof::later", 5)]]
        );
        let mut only_profiler = vec![vec![sym("backtrace::trace", 1)]];
        trim_profiler_frames(&mut only_profiler);
        assert!(only_profiler.is_empty());
    }

    #[test]
    fn builds_a_go_shaped_cpu_profile_with_shared_functions_and_locations() {
        let stacks = [
            Stack {
                thread: "tokio-runtime-worker".into(),
                frames: vec![
                    vec![sym("inner", 10), sym("outer", 20)],
                    vec![sym("main", 30)],
                ],
                count: 3,
            },
            Stack {
                thread: "main".into(),
                frames: vec![vec![sym("outer", 21)], vec![sym("main", 30)]],
                count: 1,
            },
        ];
        let timing = Timing {
            start_unix_nanos: 1_700_000_000_000_000_000,
            duration_nanos: 2_000_000_000,
            frequency_hz: 100,
        };
        let p = build(&stacks, timing);
        let s = |i: i64| p.string_table[i as usize].as_str();
        assert_eq!(p.string_table[0], "");
        let types: Vec<(&str, &str)> = p
            .sample_type
            .iter()
            .map(|t| (s(t.r#type), s(t.unit)))
            .collect();
        assert_eq!(types, [("samples", "count"), ("cpu", "nanoseconds")]);
        let period_type = p.period_type.clone().expect("period type");
        assert_eq!(
            (s(period_type.r#type), s(period_type.unit)),
            ("cpu", "nanoseconds")
        );
        assert_eq!(p.period, 10_000_000);
        assert_eq!(
            (p.time_nanos, p.duration_nanos),
            (timing.start_unix_nanos, 2_000_000_000)
        );
        // inner, outer, main: `outer` is one function at two lines.
        let names: Vec<&str> = p.function.iter().map(|f| s(f.name)).collect();
        assert_eq!(names, ["inner", "outer", "main"]);
        assert_eq!(s(p.function[0].system_name), "_ZNinner");
        assert_eq!(s(p.function[0].filename), "src/x.rs");
        // Locations: [inner@10, outer@20], [main@30], [outer@21]; `main` is shared.
        assert_eq!(p.location.len(), 3);
        assert_eq!(
            p.location[0].line,
            [
                Line {
                    function_id: 1,
                    line: 10
                },
                Line {
                    function_id: 2,
                    line: 20
                }
            ]
        );
        assert_eq!(p.sample[0].location_id, [1, 2]);
        assert_eq!(p.sample[1].location_id, [3, 2]);
        assert_eq!(p.sample[0].value, [3, 30_000_000]);
        assert_eq!(p.sample[1].value, [1, 10_000_000]);
        assert_eq!(s(p.sample[0].label[0].key), "thread");
        assert_eq!(s(p.sample[1].label[0].str), "main");
        // Ids are 1-based and dense, as pprof requires.
        for (i, f) in p.function.iter().enumerate() {
            assert_eq!(f.id, i as u64 + 1);
        }
        let bytes = p.encode_to_vec();
        assert_eq!(Profile::decode(bytes.as_slice()).expect("decode"), p);
    }
}
