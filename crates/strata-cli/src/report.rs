//! Human-readable outputs of `strata bench`: the stdout table and
//! `report.md`.

use std::path::{Path, PathBuf};

use crate::results::{QueryResult, RunResults, SystemResult};
use crate::CliError;

pub fn print_table(r: &RunResults) -> Result<(), CliError> {
    crate::out(format_args!(
        "{:<26} {:>9} {:>9} {:>12} {:>11} {:>11}\n",
        "system", "ingest s", "reopen s", "db MB", "index MB", "index RAM KB"
    ))?;
    for s in &r.systems {
        crate::out(format_args!(
            "{:<26} {:>9.2} {:>9.3} {:>12.1} {:>11.2} {:>11.1}\n",
            s.system,
            s.ingest_seconds + s.settle_seconds,
            s.reopen_seconds,
            s.db_bytes as f64 / 1e6,
            s.index_bytes as f64 / 1e6,
            s.index_memory_bytes as f64 / 1e3
        ))?;
    }
    crate::out(format_args!(
        "\n{:<26} {:<12} {:<7} {:>6} {:>10} {:>10} {:>10} {:>9} {:>9} {:>8}\n",
        "system",
        "attribute",
        "class",
        "top_k",
        "results",
        "mean us",
        "p99 us",
        "blocks",
        "min blk",
        "idx blk"
    ))?;
    for s in &r.systems {
        for q in &s.queries {
            crate::out(format_args!(
                "{:<26} {:<12} {:<7} {:>6} {:>10.1} {:>10.0} {:>10.0} {:>9.1} {:>9.1} {:>8.1}\n",
                s.system,
                q.attribute,
                q.class,
                q.top_k.map_or("-".to_string(), |k| k.to_string()),
                q.results_mean,
                q.mean_us,
                q.p99_us,
                q.blocks_read_mean,
                q.min_blocks_mean,
                q.index_blocks_mean
            ))?;
        }
    }
    Ok(())
}

/// Writes `DIR/report.md`: the tables of the papers' static experiments
/// (NEXT Tables 3-5 layout: one row per system, columns per selectivity).
pub fn write_report(r: &RunResults, dir: &Path) -> Result<PathBuf, CliError> {
    use std::fmt::Write as _;
    let mut s = String::new();
    let w = |s: &mut String, line: String| {
        let _ = writeln!(s, "{line}");
    };
    w(&mut s, format!("# Strata benchmark: {}\n", r.workload));
    w(
        &mut s,
        format!(
            "{} records, seed {}, {} reads; paper preset (64 MiB memtable and block cache, 4 KiB blocks, no compression). \
             Times are from one shared 2-core machine: compare systems side by side, and prefer the block counts, \
             which do not depend on noise.\n",
            r.records,
            r.seed,
            if r.direct_io { "direct-I/O (cold)" } else { "buffered (warm)" }
        ),
    );
    w(&mut s, "## Ingest and size\n".into());
    w(&mut s, "| system | ingest s | settle s | reopen s | tables MB | index MB | index RAM KB | write amp. |".into());
    w(&mut s, "|---|---:|---:|---:|---:|---:|---:|---:|".into());
    for x in &r.systems {
        w(
            &mut s,
            format!(
                "| {} | {:.2} | {:.2} | {:.3} | {:.1} | {:.2} | {:.1} | {:.2} |",
                x.system,
                x.ingest_seconds,
                x.settle_seconds,
                x.reopen_seconds,
                x.db_bytes as f64 / 1e6,
                x.index_bytes as f64 / 1e6,
                x.index_memory_bytes as f64 / 1e3,
                x.write_amplification
            ),
        );
    }
    let baseline = r.systems.iter().find(|x| x.queries.is_empty());
    if let Some(b) = baseline {
        w(&mut s, String::new());
        for x in r.systems.iter().filter(|x| !x.queries.is_empty()) {
            let t = |y: &SystemResult| y.ingest_seconds + y.settle_seconds;
            w(
                &mut s,
                format!(
                    "- {}: ingest (with settle) {:.2}× the no-index baseline; tables {:.3}× its size.",
                    x.system,
                    t(x) / t(b).max(1e-9),
                    x.db_bytes as f64 / (b.db_bytes.max(1)) as f64
                ),
            );
        }
    }
    let mut keys: Vec<(String, String, Option<usize>)> = Vec::new();
    for x in &r.systems {
        for q in &x.queries {
            let k = (q.attribute.clone(), q.class.clone(), q.top_k);
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
    }
    let attrs: Vec<String> = keys.iter().fold(Vec::new(), |mut v, k| {
        if !v.contains(&k.0) {
            v.push(k.0.clone());
        }
        v
    });
    for attr in &attrs {
        let cols: Vec<&(String, String, Option<usize>)> =
            keys.iter().filter(|k| &k.0 == attr).collect();
        let head = cols
            .iter()
            .map(|k| match k.2 {
                Some(t) => format!("{} top-{t}", k.1),
                None => k.1.clone(),
            })
            .collect::<Vec<_>>();
        let table = |s: &mut String, title: String, cell: &dyn Fn(&QueryResult) -> String| {
            w(s, title);
            w(s, format!("| system | {} |", head.join(" | ")));
            w(s, format!("|---|{}", "---:|".repeat(cols.len())));
            for x in r.systems.iter().filter(|x| !x.queries.is_empty()) {
                let cells: Vec<String> = cols
                    .iter()
                    .map(|k| {
                        x.queries
                            .iter()
                            .find(|q| q.attribute == k.0 && q.class == k.1 && q.top_k == k.2)
                            .map_or("-".into(), cell)
                    })
                    .collect();
                w(s, format!("| {} | {} |", x.system, cells.join(" | ")));
            }
        };
        table(
            &mut s,
            format!("\n## {attr}: mean latency (ms) / p99 (ms)\n"),
            &|q| format!("{:.2} / {:.2}", q.mean_us / 1e3, q.p99_us / 1e3),
        );
        table(
            &mut s,
            format!("\n## {attr}: data blocks read per query (physical minimum), index blocks, results\n"),
            &|q| {
                format!(
                    "{:.1} ({:.1}), {:.1} idx, {:.0} res",
                    q.blocks_read_mean, q.min_blocks_mean, q.index_blocks_mean, q.results_mean
                )
            },
        );
    }
    let bad: u64 = r
        .systems
        .iter()
        .flat_map(|x| &x.queries)
        .map(|q| q.mismatches)
        .sum();
    w(
        &mut s,
        format!(
            "\nCorrectness: {bad} queries returned a result count different from the exact count computed over the generated data."
        ),
    );
    let path = dir.join("report.md");
    std::fs::write(&path, s)
        .map_err(|e| CliError::Other(format!("write {}: {e}", path.display())))?;
    Ok(path)
}
