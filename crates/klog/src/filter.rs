//! The verbosity filter: an event reaches the output only if its klog level is at most `-v`
//! (or the `--vmodule` level of its file), whether it came through [`crate::v!`] or straight
//! from `tracing`.
//!
//! Events without a `v` field get a level from their tracing level: info, warnings and errors
//! are level 0, like klog's `InfoS`, `Warning` and `ErrorS`. Debug and trace events (mostly
//! from libraries such as kube, tonic and hyper) map to [`DEBUG_V`] and [`TRACE_V`] so that
//! the usual `-v=5` does not drown the sidecar's own lines in transport chatter.

use std::sync::Arc;

use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::subscriber::Interest;
use tracing::{Event, Level, Metadata};
use tracing_subscriber::layer::{Context, Filter};

use crate::vmodule::VModule;

/// The klog level given to `debug!` events that carry no `v` field.
pub const DEBUG_V: u8 = 6;
/// The klog level given to `trace!` events that carry no `v` field.
pub const TRACE_V: u8 = 9;

/// The klog level an event without a `v` field has.
pub fn implied_v(level: &Level) -> u8 {
    match *level {
        Level::TRACE => TRACE_V,
        Level::DEBUG => DEBUG_V,
        _ => 0,
    }
}

/// Where the filter reads `-v` and `--vmodule` from.
#[derive(Debug, Clone)]
pub enum Source {
    /// The process-wide settings ([`crate::set_verbosity`], [`crate::set_vmodule`]).
    Global,
    /// Fixed settings, for tests and for embedding several independent subscribers.
    Fixed {
        verbosity: u8,
        vmodule: Arc<VModule>,
    },
}

/// A per-layer filter implementing klog's verbosity rules.
#[derive(Debug, Clone)]
pub struct VerbosityFilter {
    source: Source,
}

impl VerbosityFilter {
    pub fn new(source: Source) -> Self {
        Self { source }
    }

    /// Whether a message at klog `level` from source `file` is logged.
    pub fn allows(&self, level: u64, file: Option<&str>) -> bool {
        match &self.source {
            Source::Global => {
                let level = u8::try_from(level).unwrap_or(u8::MAX);
                match file {
                    Some(f) => crate::enabled_in(level, f),
                    None => crate::enabled(level),
                }
            }
            Source::Fixed { verbosity, vmodule } => {
                level <= u64::from(*verbosity)
                    || file
                        .and_then(|f| vmodule.level_for(f))
                        .is_some_and(|l| level <= u64::from(l))
            }
        }
    }

    fn highest_level(&self) -> u32 {
        match &self.source {
            Source::Global => u32::from(crate::verbosity()).max(crate::vmodule_max()),
            Source::Fixed { verbosity, vmodule } => u32::from(*verbosity).max(vmodule.max_level()),
        }
    }

    fn metadata_allows(&self, meta: &Metadata<'_>) -> bool {
        self.allows(u64::from(implied_v(meta.level())), meta.file())
    }
}

impl<S> Filter<S> for VerbosityFilter {
    fn enabled(&self, meta: &Metadata<'_>, _cx: &Context<'_, S>) -> bool {
        self.metadata_allows(meta)
    }

    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        // Settings can change at run time (set_verbosity rebuilds the interest cache), so an
        // enabled callsite is only "sometimes": the per-event checks still run.
        if self.metadata_allows(meta) {
            Interest::sometimes()
        } else {
            Interest::never()
        }
    }

    fn event_enabled(&self, event: &Event<'_>, _cx: &Context<'_, S>) -> bool {
        let mut finder = FindV(None);
        event.record(&mut finder);
        match finder.0 {
            Some(v) => self.allows(v, event.metadata().file()),
            None => true, // already decided from the metadata
        }
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        let highest = self.highest_level();
        Some(if highest >= u32::from(TRACE_V) {
            LevelFilter::TRACE
        } else if highest >= u32::from(DEBUG_V) {
            LevelFilter::DEBUG
        } else {
            LevelFilter::INFO
        })
    }
}

/// Extracts the `v` field without looking at anything else.
struct FindV(Option<u64>);

impl Visit for FindV {
    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "v" {
            self.0 = Some(value);
        }
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        if field.name() == "v" {
            self.0 = Some(value.max(0) as u64);
        }
    }
    fn record_debug(&mut self, _field: &Field, _value: &dyn std::fmt::Debug) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn fixed(verbosity: u8, vmodule: &str) -> VerbosityFilter {
        VerbosityFilter::new(Source::Fixed {
            verbosity,
            vmodule: Arc::new(VModule::parse(vmodule).unwrap()),
        })
    }

    #[rstest]
    #[case(0, "", 0, "src/a.rs", true)]
    #[case(0, "", 1, "src/a.rs", false)]
    #[case(5, "", 5, "src/a.rs", true)]
    #[case(5, "", 6, "src/a.rs", false)]
    #[case(2, "a=6", 6, "src/a.rs", true)]
    #[case(2, "a=6", 7, "src/a.rs", false)]
    #[case(2, "a=6", 6, "src/b.rs", false)]
    #[case(8, "a=1", 6, "src/a.rs", true)] // vmodule never lowers -v
    fn allows(
        #[case] verbosity: u8,
        #[case] vmodule: &str,
        #[case] level: u64,
        #[case] file: &str,
        #[case] want: bool,
    ) {
        assert_eq!(fixed(verbosity, vmodule).allows(level, Some(file)), want);
    }

    #[rstest]
    #[case(0, "", LevelFilter::INFO)]
    #[case(5, "", LevelFilter::INFO)]
    #[case(6, "", LevelFilter::DEBUG)]
    #[case(2, "x=9", LevelFilter::TRACE)]
    fn hint_follows_the_highest_level(
        #[case] verbosity: u8,
        #[case] vmodule: &str,
        #[case] want: LevelFilter,
    ) {
        let f = fixed(verbosity, vmodule);
        assert_eq!(
            <VerbosityFilter as Filter<tracing_subscriber::Registry>>::max_level_hint(&f),
            Some(want)
        );
    }

    #[rstest]
    #[case(Level::ERROR, 0)]
    #[case(Level::WARN, 0)]
    #[case(Level::INFO, 0)]
    #[case(Level::DEBUG, DEBUG_V)]
    #[case(Level::TRACE, TRACE_V)]
    fn implied_levels(#[case] level: Level, #[case] want: u8) {
        assert_eq!(implied_v(&level), want);
    }
}
