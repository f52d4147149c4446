//! A short soak as CI can afford it: `edgetam soak` runs 2,400 frames through the `Pipeline`
//! at the small random-weight config (input 64) with objects added, re-prompted, removed and the
//! stream reset, and fails when resident memory after warm-up grows by more than a few MiB or
//! open file descriptors change. (The 100,000-frame run is in BENCHMARKS.md.)

use std::process::Command;

#[test]
fn pipeline_memory_stays_flat_over_a_short_soak() {
    let out = std::env::temp_dir().join(format!("edgetam-soak-{}", std::process::id()));
    let o = Command::new(env!("CARGO_BIN_EXE_edgetam"))
        .args([
            "soak",
            "--random-weights",
            "--size",
            "64",
            "--frames",
            "2400",
            "--sample-every",
            "100",
            "--warmup",
            "800",
            "--max-rss-growth-mib",
            "8",
            "--out",
        ])
        .arg(&out)
        .env("RAYON_NUM_THREADS", "2")
        .output()
        .expect("run edgetam soak");
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stdout}\n{stderr}");
    println!("{stdout}");
    let summary: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("summary.json")).expect("summary.json"),
    )
    .expect("summary");
    let n = |k: &str| {
        summary[k]
            .as_u64()
            .unwrap_or_else(|| panic!("{k} in {summary}"))
    };
    assert_eq!(n("frames"), 2400);
    assert_eq!(n("tracked"), 2400);
    assert_eq!(n("failed"), 0);
    // The schedule ran: objects came and went, one reset.
    assert!(
        n("objects_added") >= 6 && n("objects_removed") >= 2,
        "{summary}"
    );
    assert!(n("reprompts") >= 20 && n("resets") == 1, "{summary}");
    let csv = std::fs::read_to_string(out.join("series.csv")).expect("series.csv");
    assert_eq!(
        csv.lines().count(),
        1 + 1 + 24,
        "header, frame 0 and every 100 frames"
    );
    let svg = std::fs::read_to_string(out.join("soak.svg")).expect("soak.svg");
    assert!(svg.starts_with("<svg"));
    std::fs::remove_dir_all(&out).ok();
}
