//! `cargo xtask fuzz`: runs the cargo-fuzz targets of `fuzz/` one after another, each on its
//! corpus in the repository, and fails on the first crash, naming the input that caused it.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Every target under `fuzz/fuzz_targets/`, in the order they run.
pub const TARGETS: [&str; 9] = [
    "quantity",
    "secret_template",
    "topology",
    "builders",
    "csi_answers",
    "capacity_plan",
    "migration",
    "sanitize",
    "klog_format",
];

/// Runs `targets` (all when empty) for `seconds` each.
pub fn run(root: &Path, targets: &[String], seconds: u64) -> Result<()> {
    for t in targets {
        if !TARGETS.contains(&t.as_str()) {
            bail!(
                "unknown fuzz target {t:?}; the targets are {}",
                TARGETS.join(", ")
            );
        }
    }
    let chosen: Vec<&str> = if targets.is_empty() {
        TARGETS.to_vec()
    } else {
        targets.iter().map(String::as_str).collect()
    };
    let fuzz_dir = root.join("fuzz");
    let mut summary = Vec::new();
    for target in chosen {
        let corpus = fuzz_dir.join("corpus").join(target);
        std::fs::create_dir_all(&corpus).with_context(|| format!("create {}", corpus.display()))?;
        eprintln!("fuzz: {target} for {seconds} s");
        // nice: these runs share the machine with builds and other agents.
        let output = Command::new("nice")
            .args(["-n", "19", "cargo", "+nightly", "fuzz", "run", target])
            .arg(&corpus)
            .args(["--", &format!("-max_total_time={seconds}"), "-print_final_stats=1"])
            .current_dir(&fuzz_dir)
            .output()
            .context("run cargo +nightly fuzz (install it with `cargo install cargo-fuzz` and a nightly toolchain)")?;
        let log = String::from_utf8_lossy(&output.stderr);
        let executions =
            stat(&log, "stat::number_of_executed_units:").unwrap_or_else(|| "?".into());
        let artifact = log.lines().find_map(|l| {
            l.split_once("Test unit written to ")
                .map(|(_, p)| p.trim().to_string())
        });
        summary.push(format!(
            "{target}: {executions} executions, {} crash",
            usize::from(artifact.is_some())
        ));
        eprintln!("{}", summary.last().map(String::as_str).unwrap_or_default());
        if let Some(artifact) = artifact {
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            eprintln!("{}", tail.join("\n"));
            bail!(
                "fuzz target {target} crashed on {artifact}: reproduce with `cd fuzz && cargo +nightly fuzz run {target} {artifact}`, fix the crate and add the input as a regression unit test"
            );
        }
        if !output.status.success() {
            eprintln!("{log}");
            bail!(
                "cargo fuzz run {target} failed ({}) without a crash artifact",
                output.status
            );
        }
    }
    println!("{}", summary.join("\n"));
    Ok(())
}

/// The value of one libFuzzer `-print_final_stats` line.
fn stat(log: &str, name: &str) -> Option<String> {
    log.lines()
        .find_map(|l| l.strip_prefix(name))
        .map(|v| v.trim().to_string())
}
