//! Which handler serves a request path, as Go's `http.ServeMux` with upstream's patterns
//! would choose. Routing is done here rather than with axum's router because the metrics
//! path is user input and axum's router panics on some patterns (`{`, `*`, duplicates).

/// What to serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    Metrics,
    LeaderHealth,
    PprofIndex,
    PprofCmdline,
    PprofProfile,
    /// A Go profile name under `/debug/pprof/` that has no equivalent here.
    PprofMissing(String),
    /// The capacity view as a page (ours, with `--enable-capacity`).
    CapacityPage,
    /// The same as JSON, for `csi-provisioner capacity --endpoint`.
    CapacityJson,
    /// A subtree's root named without its trailing slash: Go's mux answers 301 to the root
    /// (this path with the slash).
    Redirect(String),
    NotFound,
}

const LEADER_HEALTH_PATH: &str = "/healthz/leader-election";
const PPROF_PREFIX: &str = "/debug/pprof/";
pub(crate) const CAPACITY_PATH: &str = "/capacity";
pub(crate) const CAPACITY_JSON_PATH: &str = "/capacity.json";

/// The patterns this process serves.
#[derive(Debug, Clone)]
pub(crate) struct Routes {
    pub metrics_path: String,
    pub leader_health: bool,
    pub pprof: bool,
    pub capacity: bool,
}

impl Routes {
    /// The route for `path`. Like Go's mux, a pattern ending in `/` matches its whole subtree
    /// and any other pattern only itself; the metrics path wins over the fixed patterns.
    pub fn route(&self, path: &str) -> Route {
        if matches(&self.metrics_path, path) {
            return Route::Metrics;
        }
        if self.leader_health && path == LEADER_HEALTH_PATH {
            return Route::LeaderHealth;
        }
        if self.pprof
            && let Some(name) = path.strip_prefix(PPROF_PREFIX)
        {
            return match name {
                "" => Route::PprofIndex,
                "cmdline" => Route::PprofCmdline,
                "profile" => Route::PprofProfile,
                other => Route::PprofMissing(other.to_string()),
            };
        }
        if self.capacity {
            match path {
                CAPACITY_PATH => return Route::CapacityPage,
                CAPACITY_JSON_PATH => return Route::CapacityJson,
                _ => {}
            }
        }
        let root = format!("{path}/");
        if self.metrics_path == root || (self.pprof && root == PPROF_PREFIX) {
            return Route::Redirect(root);
        }
        Route::NotFound
    }
}

fn matches(pattern: &str, path: &str) -> bool {
    if pattern.is_empty() {
        return false;
    }
    if pattern.ends_with('/') {
        path.starts_with(pattern)
    } else {
        path == pattern
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_like_go_servemux() {
        let all = Routes {
            metrics_path: "/metrics".into(),
            leader_health: true,
            pprof: true,
            capacity: true,
        };
        let bare = Routes {
            metrics_path: "/custom/".into(),
            leader_health: false,
            pprof: false,
            capacity: false,
        };
        let cases: &[(&Routes, &str, Route)] = &[
            (&all, "/metrics", Route::Metrics),
            (&all, "/metrics/", Route::NotFound),
            (&all, "/metricsx", Route::NotFound),
            (&all, "/healthz/leader-election", Route::LeaderHealth),
            (&all, "/healthz/leader-election/", Route::NotFound),
            (&all, "/healthz", Route::NotFound),
            (&all, "/debug/pprof/", Route::PprofIndex),
            (
                &all,
                "/debug/pprof",
                Route::Redirect("/debug/pprof/".into()),
            ),
            (&bare, "/debug/pprof", Route::NotFound),
            (&bare, "/custom", Route::Redirect("/custom/".into())),
            (&all, "/debug/pprof/cmdline", Route::PprofCmdline),
            (&all, "/debug/pprof/profile", Route::PprofProfile),
            (
                &all,
                "/debug/pprof/heap",
                Route::PprofMissing("heap".into()),
            ),
            (&all, "/", Route::NotFound),
            (&all, "/capacity", Route::CapacityPage),
            (&all, "/capacity.json", Route::CapacityJson),
            (&all, "/capacity/", Route::NotFound),
            (&bare, "/capacity", Route::NotFound),
            (&bare, "/custom/", Route::Metrics),
            (&bare, "/custom/x", Route::Metrics),
            (&bare, "/metrics", Route::NotFound),
            (&bare, "/healthz/leader-election", Route::NotFound),
            (&bare, "/debug/pprof/", Route::NotFound),
        ];
        for (routes, path, want) in cases {
            assert_eq!(&routes.route(path), want, "{path} with {routes:?}");
        }
        let odd = Routes {
            metrics_path: "/healthz/leader-election".into(),
            leader_health: true,
            pprof: false,
            capacity: false,
        };
        assert_eq!(odd.route("/healthz/leader-election"), Route::Metrics);
        let empty = Routes {
            metrics_path: String::new(),
            leader_health: false,
            pprof: false,
            capacity: false,
        };
        assert_eq!(empty.route(""), Route::NotFound);
    }
}
