//! Human-readable outputs of `strata bench`: the stdout table, and
//! `report.md` with its PNG plots and a "Paper vs us" section.
//!
//! The report mirrors the papers' tables (NEXT Tables 3-5: one row per
//! system, one column per selectivity class). The paper claims it checks
//! are data (the table `CLAIMS`): each has the paper's figure with its source, how
//! our figure is computed from [`RunResults`], and the rule that decides
//! "reproduced", "not reproduced" or "not measured in this run".

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use strata::StrategyKind;

use crate::names::SystemName;
use crate::plot::{self, BarChart, BarSeries, LineChart, LineSeries, Scale};
use crate::Error;
use strata_bench::results::{MixedInterval, OpSummary, QueryResult, RunResults, SystemResult};

// ------------------------------------------------------------- stdout

/// The stdout table of a run: ingest cost and sizes per system, then one
/// row per query set (and per operation kind of a mixed sequence).
pub fn table(r: &RunResults) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{:<34} {:>9} {:>9} {:>9} {:>12} {:>11} {:>11} {:>8}",
        "system", "ingest s", "cpu s", "reopen s", "db MB", "index MB", "index RAM KB", "stall s"
    );
    for s in &r.systems {
        let _ = writeln!(
            o,
            "{:<34} {:>9.2} {:>9} {:>9.3} {:>12.1} {:>11.2} {:>11.1} {:>8}",
            s.system,
            s.ingest_seconds + s.settle_seconds,
            s.ingest_cpu_seconds
                .map_or_else(|| "-".to_string(), |v| format!("{v:.2}")),
            s.reopen_seconds,
            s.db_bytes as f64 / 1e6,
            s.index_bytes as f64 / 1e6,
            s.index_memory_bytes as f64 / 1e3,
            s.write_stall_seconds
                .map_or_else(|| "-".to_string(), |v| format!("{v:.3}"))
        );
    }
    if r.systems.iter().any(|s| !s.queries.is_empty()) {
        let _ = writeln!(
            o,
            "\n{:<34} {:<12} {:<7} {:>6} {:>10} {:>10} {:>10} {:>9} {:>9} {:>8} {:>9} {:>7}",
            "system",
            "attribute",
            "class",
            "top_k",
            "results",
            "mean us",
            "p99 us",
            "blocks",
            "min blk",
            "idx blk",
            "floor us",
            "x floor"
        );
    }
    for s in &r.systems {
        for q in &s.queries {
            let _ = writeln!(
                o,
                "{:<34} {:<12} {:<7} {:>6} {:>10.1} {:>10.0} {:>10.0} {:>9.1} {:>9.1} {:>8.1} {:>9} {:>7}",
                s.system,
                q.attribute,
                q.class,
                q.top_k.map_or("-".to_string(), |k| k.to_string()),
                q.results_mean,
                q.mean_us,
                q.p99_us,
                q.blocks_read_mean,
                q.min_blocks_mean,
                q.index_blocks_mean,
                floor_cell(q.floor_us_mean, 0),
                floor_cell(q.floor_multiple, 2)
            );
        }
    }
    if r.systems.iter().any(|s| !s.ops.is_empty()) {
        let _ = writeln!(
            o,
            "\n{:<34} {:<7} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "system", "op", "count", "ops/s", "mean us", "p50 us", "p95 us", "p99 us"
        );
        for s in &r.systems {
            for op in &s.ops {
                let _ = writeln!(
                    o,
                    "{:<34} {:<7} {:>9} {:>10.0} {:>10.1} {:>10.1} {:>10.1} {:>10.1}",
                    s.system,
                    op.op,
                    op.count,
                    op.ops_per_sec,
                    op.mean_us,
                    op.p50_us,
                    op.p95_us,
                    op.p99_us
                );
            }
        }
    }
    o
}

/// Per-operation summary of mixed and replayed runs (printed after
/// [`table`]).
pub fn ops_table(r: &RunResults) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "\n{:<34} {:<7} {:>8} {:>11} {:>10} {:>8} {:>10} {:>10} {:>10}",
        "system", "op", "count", "ops/s", "mean us", "cpu us", "p50 us", "p99 us", "mismatch"
    );
    for s in &r.systems {
        for op in &s.ops {
            let _ = writeln!(
                o,
                "{:<34} {:<7} {:>8} {:>11.0} {:>10.1} {:>8} {:>10.1} {:>10.1} {:>10}",
                s.system,
                op.op,
                op.count,
                op.ops_per_sec,
                op.mean_us,
                cpu_cell(op),
                op.p50_us,
                op.p99_us,
                op.mismatches
            );
        }
    }
    o
}

// ------------------------------------------------------------ helpers

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    std::fs::write(path, bytes).map_err(|e| Error::Other(format!("write {}: {e}", path.display())))
}

/// The (attribute, class, top_k) query sets of the run, in first-seen order.
fn query_keys(r: &RunResults) -> Vec<(String, String, Option<usize>)> {
    let mut keys: Vec<(String, String, Option<usize>)> = Vec::new();
    for x in &r.systems {
        for q in &x.queries {
            let k = (q.attribute.clone(), q.class.clone(), q.top_k);
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
    }
    keys
}

fn attributes(r: &RunResults) -> Vec<String> {
    query_keys(r).into_iter().fold(Vec::new(), |mut v, k| {
        if !v.contains(&k.0) {
            v.push(k.0);
        }
        v
    })
}

fn find<'a>(
    s: &'a SystemResult,
    attr: &str,
    class: &str,
    top_k: Option<usize>,
) -> Option<&'a QueryResult> {
    s.queries
        .iter()
        .find(|q| q.attribute == attr && q.class == class && q.top_k == top_k)
}

fn set_label(class: &str, top_k: Option<usize>) -> String {
    match top_k {
        Some(t) => format!("{class} top-{t}"),
        None => class.to_string(),
    }
}

/// File-name-safe form of an attribute name.
fn file_part(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// A floor figure, or "-" when the system reported none (0).
fn floor_cell(v: f64, precision: usize) -> String {
    if v <= 0.0 || !v.is_finite() {
        return "-".to_string();
    }
    format!("{v:.precision$}")
}

/// The physical minimum of data blocks of a query set, `None` when the
/// system does not report it (0 although blocks were read).
fn minimum(q: &QueryResult) -> Option<f64> {
    let m = q.min_blocks_mean;
    (m.is_finite() && (m > 0.0 || q.blocks_read_mean == 0.0)).then_some(m)
}

/// Mean over a mixed run's intervals (non-finite means skipped).
fn mixed_mean(m: &[MixedInterval]) -> Option<f64> {
    let v: Vec<f64> = m
        .iter()
        .map(|i| i.mean_us)
        .filter(|x| x.is_finite())
        .collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

// ---------------------------------------------------------------- plots

/// Names of the plot files written for a run (relative to DIR).
#[derive(Debug, Default)]
struct Plots {
    ingest: Option<String>,
    latency: Vec<(String, String)>,
    blocks: Vec<(String, String)>,
    mixed: Option<String>,
}

impl Plots {
    fn latency_of(&self, attr: &str) -> Option<&str> {
        self.latency
            .iter()
            .find(|x| x.0 == attr)
            .map(|x| x.1.as_str())
    }
    fn blocks_of(&self, attr: &str) -> Option<&str> {
        self.blocks
            .iter()
            .find(|x| x.0 == attr)
            .map(|x| x.1.as_str())
    }
}

const CHART_W: u32 = 900;
const CHART_H: u32 = 440;

/// Width of `ingest.png` (two charts with a group per system): 1100
/// pixels, wider for many systems so that their names stay readable.
fn ingest_width(systems: usize) -> u32 {
    let systems = u32::try_from(systems).unwrap_or(u32::MAX);
    1100u32.max(2 * (100 + 80u32.saturating_mul(systems)))
}

fn write_plots(r: &RunResults, dir: &Path) -> Result<Plots, Error> {
    let mut plots = Plots::default();
    let keys = query_keys(r);
    for attr in attributes(r) {
        let sets: Vec<&(String, String, Option<usize>)> =
            keys.iter().filter(|k| k.0 == attr).collect();
        let systems: Vec<&SystemResult> = r
            .systems
            .iter()
            .filter(|s| s.queries.iter().any(|q| q.attribute == attr))
            .collect();
        let groups: Vec<String> = sets.iter().map(|k| set_label(&k.1, k.2)).collect();
        let column = |s: &SystemResult, f: &dyn Fn(&QueryResult) -> f64| -> Vec<Option<f64>> {
            sets.iter()
                .map(|k| find(s, &attr, &k.1, k.2).map(f).filter(|v| v.is_finite()))
                .collect()
        };
        let latency = BarChart {
            title: format!("{attr}: mean latency per query"),
            y_label: "mean latency (ms, log scale)".into(),
            groups: groups.clone(),
            series: systems
                .iter()
                .map(|s| BarSeries::new(s.system.clone(), column(s, &|q| q.mean_us / 1e3)))
                .collect(),
            scale: Scale::Log,
            notes: Vec::new(),
        };
        let name = format!("latency_{}.png", file_part(&attr));
        write_file(
            &dir.join(&name),
            &plot::bar_chart_png(&latency, CHART_W, CHART_H)?,
        )?;
        plots.latency.push((attr.clone(), name));

        let blocks = BarChart {
            title: format!("{attr}: blocks read per query"),
            y_label: "blocks per query (log scale)".into(),
            groups,
            series: systems
                .iter()
                .map(|s| BarSeries {
                    name: s.system.clone(),
                    values: column(s, &|q| q.blocks_read_mean),
                    stacked: column(s, &|q| q.index_blocks_mean),
                    markers: sets
                        .iter()
                        .map(|k| find(s, &attr, &k.1, k.2).and_then(minimum))
                        .collect(),
                })
                .collect(),
            scale: Scale::Log,
            notes: vec![
                "solid: data blocks, light top: secondary-index blocks, black tick: physical minimum of data blocks".into(),
            ],
        };
        let name = format!("blocks_{}.png", file_part(&attr));
        write_file(
            &dir.join(&name),
            &plot::bar_chart_png(&blocks, CHART_W, CHART_H)?,
        )?;
        plots.blocks.push((attr.clone(), name));
    }

    if !r.systems.is_empty() {
        let names: Vec<String> = r.systems.iter().map(|s| s.system.clone()).collect();
        let time = BarChart {
            title: "Ingest time".into(),
            y_label: "seconds".into(),
            groups: names.clone(),
            series: vec![
                BarSeries::new(
                    "ingest s",
                    r.systems.iter().map(|s| Some(s.ingest_seconds)).collect(),
                ),
                BarSeries::new(
                    "settle s",
                    r.systems.iter().map(|s| Some(s.settle_seconds)).collect(),
                ),
            ],
            scale: Scale::Linear,
            notes: Vec::new(),
        };
        let mb = |f: &dyn Fn(&SystemResult) -> u64| -> Vec<Option<f64>> {
            r.systems.iter().map(|s| Some(f(s) as f64 / 1e6)).collect()
        };
        let size = BarChart {
            title: "Size".into(),
            y_label: "MB".into(),
            groups: names,
            series: vec![
                BarSeries::new("tables MB", mb(&|s| s.db_bytes)),
                BarSeries::new("index on disk MB", mb(&|s| s.index_bytes)),
                BarSeries::new("index RAM MB", mb(&|s| s.index_memory_bytes)),
            ],
            scale: Scale::Linear,
            notes: Vec::new(),
        };
        let name = "ingest.png".to_string();
        write_file(
            &dir.join(&name),
            &plot::bar_charts_png(&[&time, &size], ingest_width(r.systems.len()), CHART_H)?,
        )?;
        plots.ingest = Some(name);
    }

    let mixed: Vec<&SystemResult> = r.systems.iter().filter(|s| !s.mixed.is_empty()).collect();
    if !mixed.is_empty() {
        let chart = LineChart {
            title: format!("{}: mean latency per interval", r.workload),
            x_label: "operations done".into(),
            y_label: "mean latency per operation (us)".into(),
            series: mixed
                .iter()
                .map(|s| LineSeries {
                    name: s.system.clone(),
                    points: s
                        .mixed
                        .iter()
                        .map(|m| (m.ops_done as f64, m.mean_us))
                        .collect(),
                })
                .collect(),
            scale: Scale::Linear,
        };
        let name = "mixed.png".to_string();
        write_file(
            &dir.join(&name),
            &plot::line_chart_png(&chart, CHART_W, CHART_H)?,
        )?;
        plots.mixed = Some(name);
    }
    Ok(plots)
}

// ------------------------------------------------------------- report

/// Writes `DIR/report.md` and its plots (`latency_<attribute>.png`,
/// `blocks_<attribute>.png`, `ingest.png`, `mixed.png`; a plot without data
/// is skipped): the tables of the papers' experiments (NEXT Tables 3-5
/// layout: one row per system, columns per selectivity), per-operation
/// tables, the correctness line and the "Paper vs us" section.
pub fn write_report(r: &RunResults, dir: &Path) -> Result<PathBuf, Error> {
    let plots = write_plots(r, dir)?;
    let s = render_markdown(r, &plots);
    let path = dir.join("report.md");
    write_file(&path, s.as_bytes())?;
    Ok(path)
}

fn render_markdown(r: &RunResults, plots: &Plots) -> String {
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
            if r.direct_io {
                "direct-I/O (cold)"
            } else if r.mmap_reads {
                "memory-mapped (warm)"
            } else {
                "buffered (warm)"
            }
        ),
    );
    w(&mut s, "## Ingest and size\n".into());
    w(&mut s, "| system | ingest s | settle s | ingest CPU s | reopen s | tables MB | index MB | index RAM KB | write amp. |".into());
    w(
        &mut s,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|".into(),
    );
    for x in &r.systems {
        w(
            &mut s,
            format!(
                "| {} | {:.2} | {:.2} | {} | {:.3} | {:.1} | {:.2} | {:.1} | {:.2} |",
                x.system,
                x.ingest_seconds,
                x.settle_seconds,
                x.ingest_cpu_seconds
                    .map_or_else(|| "–".to_string(), |v| format!("{v:.2}")),
                x.reopen_seconds,
                x.db_bytes as f64 / 1e6,
                x.index_bytes as f64 / 1e6,
                x.index_memory_bytes as f64 / 1e3,
                x.write_amplification
            ),
        );
    }
    let baseline = r.systems.iter().find(|x| kind(&x.system) == Kind::NoIndex);
    if let Some(b) = baseline {
        w(&mut s, String::new());
        for x in r.systems.iter().filter(|x| !std::ptr::eq(*x, b)) {
            let t = |y: &SystemResult| y.ingest_seconds + y.settle_seconds;
            let cpu = match (x.ingest_cpu_seconds, b.ingest_cpu_seconds) {
                (Some(cx), Some(cb)) => format!(", CPU {:.2}×", cx / cb.max(1e-9)),
                _ => String::new(),
            };
            w(
                &mut s,
                format!(
                    "- {}: ingest (with settle) {:.2}× the no-index baseline{cpu}; tables {:.3}× its size.",
                    x.system,
                    t(x) / t(b).max(1e-9),
                    x.db_bytes as f64 / (b.db_bytes.max(1)) as f64
                ),
            );
        }
    }
    if let Some(p) = &plots.ingest {
        w(
            &mut s,
            format!("\n![ingest time and sizes per system]({p})"),
        );
    }

    let keys = query_keys(r);
    for attr in attributes(r) {
        let cols: Vec<&(String, String, Option<usize>)> =
            keys.iter().filter(|k| k.0 == attr).collect();
        let head = cols
            .iter()
            .map(|k| set_label(&k.1, k.2))
            .collect::<Vec<_>>();
        let table = |s: &mut String, title: String, cell: &dyn Fn(&QueryResult) -> String| {
            w(s, title);
            w(s, format!("| system | {} |", head.join(" | ")));
            w(s, format!("|---|{}", "---:|".repeat(cols.len())));
            for x in r.systems.iter().filter(|x| !x.queries.is_empty()) {
                let cells: Vec<String> = cols
                    .iter()
                    .map(|k| find(x, &k.0, &k.1, k.2).map_or("-".into(), cell))
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
            format!("\n## {attr}: latency as a multiple of the physical floor (floor: pread + CRC32C of the distinct data blocks holding the results, µs)\n"),
            &|q| {
                if q.floor_multiple > 0.0 {
                    format!("{:.2}× ({:.0})", q.floor_multiple, q.floor_us_mean)
                } else {
                    "–".to_string()
                }
            },
        );
        if let Some(p) = plots.latency_of(&attr) {
            w(
                &mut s,
                format!("\n![{attr}: mean latency by selectivity class]({p})"),
            );
        }
        table(
            &mut s,
            format!("\n## {attr}: data blocks read per query (physical minimum), index blocks, results\n"),
            &|q| {
                let min = minimum(q).map_or("–".to_string(), |m| format!("{m:.1}"));
                format!(
                    "{:.1} ({min}), {:.1} idx, {:.0} res",
                    q.blocks_read_mean, q.index_blocks_mean, q.results_mean
                )
            },
        );
        if let Some(p) = plots.blocks_of(&attr) {
            w(
                &mut s,
                format!("\n![{attr}: blocks read per query vs the physical minimum]({p})"),
            );
        }
    }

    if r.systems.iter().any(|x| !x.ops.is_empty()) {
        w(&mut s, "\n## Operations\n".into());
        w(
            &mut s,
            "| system | op | count | ops/s | mean µs | cpu µs | p50 µs | p95 µs | p99 µs |".into(),
        );
        w(
            &mut s,
            "|---|---|---:|---:|---:|---:|---:|---:|---:|".into(),
        );
        for x in &r.systems {
            for o in &x.ops {
                w(&mut s, op_row(&x.system, o));
            }
        }
    }

    let mixed: Vec<&SystemResult> = r.systems.iter().filter(|x| !x.mixed.is_empty()).collect();
    if !mixed.is_empty() {
        w(
            &mut s,
            "\n## Mixed workload: mean latency per interval (µs)\n".into(),
        );
        let names: Vec<&str> = mixed.iter().map(|x| x.system.as_str()).collect();
        w(
            &mut s,
            format!("| operations done | {} |", names.join(" | ")),
        );
        w(&mut s, format!("|---:|{}", "---:|".repeat(names.len())));
        let mut done: Vec<u64> = mixed
            .iter()
            .flat_map(|x| x.mixed.iter().map(|m| m.ops_done))
            .collect();
        done.sort_unstable();
        done.dedup();
        for d in done {
            let cells: Vec<String> = mixed
                .iter()
                .map(|x| {
                    x.mixed
                        .iter()
                        .find(|m| m.ops_done == d)
                        .map_or("-".into(), |m| format!("{:.1}", m.mean_us))
                })
                .collect();
            w(&mut s, format!("| {d} | {} |", cells.join(" | ")));
        }
        if let Some(p) = &plots.mixed {
            w(
                &mut s,
                format!("\n![mean latency per interval vs operations done]({p})"),
            );
        }
    }

    let checked: usize = r
        .systems
        .iter()
        .flat_map(|x| &x.queries)
        .map(|q| q.count)
        .sum();
    let bad: u64 = r
        .systems
        .iter()
        .flat_map(|x| &x.queries)
        .map(|q| q.mismatches)
        .sum();
    w(
        &mut s,
        format!(
            "\nCorrectness: {bad} queries returned a result count different from the exact count computed over the generated data ({checked} queries checked: {}).",
            if bad == 0 { "OK" } else { "FAILED" }
        ),
    );

    w(&mut s, "\n## Paper vs us\n".into());
    w(
        &mut s,
        "Each row is one claim of the papers, with the paper's figure (from its text and tables: RocksDB/LevelDB, \
         30-115 M records on a 10-core server) and ours from this run. Verdict rule: **reproduced** when our figure \
         meets the row's rule; **not reproduced** when it is measured and misses it; **not measured in this run** \
         when a system or query set the claim needs was not in the run (the reason is given). Ratios over several \
         attributes are geometric means (per-attribute values in brackets). The rules test the direction and rough \
         size of each claim; the absolute numbers are not comparable across machines and data sizes.\n"
            .into(),
    );
    w(
        &mut s,
        "| claim | source | paper | ours | rule | verdict |".into(),
    );
    w(&mut s, "|---|---|---|---|---|---|".into());
    for o in paper_vs_us(r) {
        w(
            &mut s,
            format!(
                "| {} | {} | {} | {} | {} | {} |",
                o.claim.claim,
                o.claim.source,
                o.claim.paper,
                o.ours,
                o.claim.rule.describe(o.claim.unit),
                o.verdict.as_str()
            ),
        );
    }
    s
}

fn op_row(system: &str, o: &OpSummary) -> String {
    format!(
        "| {} | {} | {} | {:.0} | {:.1} | {} | {:.1} | {:.1} | {:.1} |",
        system,
        o.op,
        o.count,
        o.ops_per_sec,
        o.mean_us,
        cpu_cell(o),
        o.p50_us,
        o.p95_us,
        o.p99_us
    )
}

/// An operation's mean thread CPU time, `–` where not measured.
fn cpu_cell(o: &OpSummary) -> String {
    o.cpu_mean_us
        .map_or_else(|| "–".to_string(), |c| format!("{c:.1}"))
}

// --------------------------------------------------------- paper vs us

/// What a benchmarked system is, in the papers' terms, from its name
/// (`strata:<strategy>[params]`, or a peer's `<name>:<kind>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    NoIndex,
    /// NEXT with value-aware splitting (δ) on, whatever its value.
    Next,
    /// NEXT with `delta=off`.
    NextNoDelta,
    /// The in-RAM index of NEXT §6.1 ("Eager": `strata:memory`).
    Eager,
    /// LSM stand-alone index with composite keys (NEXT §6.1 "Standalone").
    Standalone,
    /// Per-SST index (NEXT §6.1 "Embedded").
    Embedded,
    Other,
}

/// The kind of system `name` is (its strategy, whatever the family; see
/// [`crate::names`]): `Other` for a name without a strategy or that does
/// not parse.
pub(crate) fn kind(name: &str) -> Kind {
    let Ok(n) = SystemName::parse(name) else {
        return Kind::Other;
    };
    let delta_off = n.param("delta") == Some("off");
    // "none" is the harness's system without an index, not a strategy.
    if n.strategy.as_deref() == Some(crate::names::NO_INDEX) {
        return Kind::NoIndex;
    }
    match n.strategy.as_deref().map(StrategyKind::parse) {
        Some(Ok(StrategyKind::Next)) if delta_off => Kind::NextNoDelta,
        Some(Ok(StrategyKind::Next)) => Kind::Next,
        Some(Ok(StrategyKind::Memory)) => Kind::Eager,
        Some(Ok(StrategyKind::Composite)) => Kind::Standalone,
        Some(Ok(StrategyKind::Embedded)) => Kind::Embedded,
        _ => Kind::Other,
    }
}

/// A system name without parameters (for NEXT: the default δ).
fn plain(name: &str) -> bool {
    SystemName::parse(name).is_ok_and(|n| n.params.is_empty())
}

/// The run's system of kind `k`: the first one, preferring one without
/// parameters (for NEXT: the default δ).
fn system(r: &RunResults, k: Kind) -> Result<&SystemResult, String> {
    let all: Vec<&SystemResult> = r.systems.iter().filter(|s| kind(&s.system) == k).collect();
    all.iter()
        .find(|s| plain(&s.system))
        .or(all.first())
        .copied()
        .ok_or_else(|| format!("no {} system in this run", k.label()))
}

impl Kind {
    fn short(self) -> &'static str {
        match self {
            Kind::NoIndex => "no index",
            Kind::Next => "NEXT",
            Kind::NextNoDelta => "NEXT δ=off",
            Kind::Eager => "Eager",
            Kind::Standalone => "Standalone",
            Kind::Embedded => "Embedded",
            Kind::Other => "other",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Kind::NoIndex => "no-index",
            Kind::Next => "NEXT (δ on)",
            Kind::NextNoDelta => "NEXT δ=off",
            Kind::Eager => "Eager (strata:memory)",
            Kind::Standalone => "Standalone (composite)",
            Kind::Embedded => "Embedded",
            Kind::Other => "other",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Metric {
    MeanLatency,
    DataBlocks,
    /// Data blocks plus secondary-index blocks.
    AllBlocks,
}

impl Metric {
    fn of(self, q: &QueryResult) -> f64 {
        match self {
            Metric::MeanLatency => q.mean_us,
            Metric::DataBlocks => q.blocks_read_mean,
            Metric::AllBlocks => q.blocks_read_mean + q.index_blocks_mean,
        }
    }
    fn label(self) -> &'static str {
        match self {
            Metric::MeanLatency => "mean latency",
            Metric::DataBlocks => "data blocks",
            Metric::AllBlocks => "data+index blocks",
        }
    }
}

/// How our figure for a claim is computed from the run.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Measure {
    /// `metric(a) / metric(b)` on the full query set of `class`, per
    /// attribute; geometric mean over attributes.
    Ratio {
        a: Kind,
        b: Kind,
        class: &'static str,
        metric: Metric,
    },
    /// As `Ratio`, against the lowest of the compared index systems present
    /// (Eager, Standalone, Embedded) for each attribute.
    RatioToBest { class: &'static str, metric: Metric },
    /// `(ingest + settle)` of `a` over that of `b`.
    Ingest { a: Kind, b: Kind },
    /// On-disk bytes of `a` over those of `b`.
    DbSize { a: Kind, b: Kind },
    /// NEXT's on-disk index bytes over the primary table's bytes (the
    /// no-index system's tables, or NEXT's tables minus its index).
    IndexShare,
    /// NEXT's in-RAM index bytes per index over its table bytes.
    RamShare,
    /// In-RAM index bytes of `a` over those of `b`.
    Ram { a: Kind, b: Kind },
    /// Data blocks read over the physical minimum: the worst full query set
    /// of `a`.
    OverMinimum { a: Kind },
    /// NEXT data+index blocks of the top-K set (smallest K) over the full
    /// set of the same class; geometric mean over attributes.
    TopK { class: &'static str },
    /// Largest reduction of data+index blocks by any NEXT with δ on against
    /// NEXT δ=off, over all full query sets (1 - best ratio).
    DeltaReduction,
    /// Mean of the mixed run's interval means of `a` over the lowest of
    /// the Standalone and Embedded systems present.
    Mixed { a: Kind },
}

impl Measure {
    /// How our figure is computed, in a few words (the report prints it
    /// before the figure).
    fn describe(self) -> String {
        match self {
            Measure::Ratio {
                a,
                b,
                class,
                metric,
            } => {
                format!(
                    "{}/{} {}, {class} sets",
                    a.short(),
                    b.short(),
                    metric.label()
                )
            }
            Measure::RatioToBest { class, metric } => {
                format!("NEXT/best compared index {}, {class} sets", metric.label())
            }
            Measure::Ingest { a, b } => format!("{}/{} ingest+settle time", a.short(), b.short()),
            Measure::DbSize { a, b } => format!("{}/{} bytes on disk", a.short(), b.short()),
            Measure::IndexShare => "NEXT index bytes on disk / primary table bytes".into(),
            Measure::RamShare => "NEXT index RAM per index / its table bytes".into(),
            Measure::Ram { a, b } => format!("{}/{} index RAM", a.short(), b.short()),
            Measure::OverMinimum { a } => {
                format!(
                    "{} data blocks / physical minimum, worst full set",
                    a.short()
                )
            }
            Measure::TopK { class } => format!("NEXT top-K/full data+index blocks, {class} sets"),
            Measure::DeltaReduction => "largest cut in data+index blocks, NEXT δ on vs off".into(),
            Measure::Mixed { a } => format!(
                "{}/best of Standalone, Embedded: mean op latency over intervals",
                a.short()
            ),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Rule {
    AtMost(f64),
    AtLeast(f64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unit {
    Ratio,
    Percent,
}

fn fmt_value(v: f64, unit: Unit) -> String {
    match unit {
        Unit::Ratio if v < 0.1 => format!("{v:.3}×"),
        Unit::Ratio => format!("{v:.2}×"),
        Unit::Percent => format!("{:.1}%", v * 100.0),
    }
}

/// A rule's threshold, with every significant digit (0.845×, 12.5%).
fn fmt_threshold(v: f64, unit: Unit) -> String {
    let (x, suffix) = match unit {
        Unit::Ratio => (v, "×"),
        Unit::Percent => (v * 100.0, "%"),
    };
    let t = format!("{x:.3}");
    let t = t.trim_end_matches('0').trim_end_matches('.');
    format!("{t}{suffix}")
}

impl Rule {
    fn holds(self, v: f64) -> bool {
        match self {
            Rule::AtMost(x) => v <= x,
            Rule::AtLeast(x) => v >= x,
        }
    }
    fn describe(self, unit: Unit) -> String {
        match self {
            Rule::AtMost(x) => format!("ours ≤ {}", fmt_threshold(x, unit)),
            Rule::AtLeast(x) => format!("ours ≥ {}", fmt_threshold(x, unit)),
        }
    }
}

/// One paper claim: the paper's figure, where it is from, how ours is
/// computed, and the rule that decides the verdict.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Claim {
    /// Stable name (tests and tools refer to claims by it).
    #[cfg_attr(not(test), allow(dead_code))]
    pub id: &'static str,
    pub claim: &'static str,
    pub source: &'static str,
    pub paper: &'static str,
    pub measure: Measure,
    pub unit: Unit,
    pub rule: Rule,
}

/// NEXT's headline claims (and two from the studies NEXT builds on). Paper
/// ratios are computed from the cited tables: Table 4 = Tweet, Table 3 =
/// OSM Buildings; "sp." spatial attribute (coordinates, bbox), "num."
/// numerical (user_id, perimeter).
pub(crate) const CLAIMS: &[Claim] = &[
    Claim {
        id: "large-data-blocks-eager",
        claim: "Large selectivity: NEXT reads fewer data blocks than the Eager (in-RAM stand-alone) index, which navigates from keys to records",
        source: "NEXT §2.2.2, §6.2.1",
        paper: "no block counts; mechanism claim (index navigation = per-key point lookups), seen as NEXT/Eager latency 0.34× sp. / 0.44× num. (Table 4)",
        measure: Measure::Ratio { a: Kind::Next, b: Kind::Eager, class: "large", metric: Metric::DataBlocks },
        unit: Unit::Ratio,
        rule: Rule::AtMost(0.9),
    },
    Claim {
        id: "large-data-blocks-standalone",
        claim: "Large selectivity: NEXT reads fewer data blocks than the LSM stand-alone (composite-key) index",
        source: "NEXT §2.2.2, §6.2.1",
        paper: "no block counts; NEXT/Standalone latency 0.50× sp. / 0.42× num. (Table 4)",
        measure: Measure::Ratio { a: Kind::Next, b: Kind::Standalone, class: "large", metric: Metric::DataBlocks },
        unit: Unit::Ratio,
        rule: Rule::AtMost(0.9),
    },
    Claim {
        id: "large-latency-eager",
        claim: "Large selectivity: NEXT is faster than Eager",
        source: "NEXT §6.2.1, Tables 3-4",
        paper: "NEXT/Eager latency: Tweet 69.83/203.67 s = 0.34× sp., 52.29/118.27 = 0.44× num.; OSMB 0.32× sp., 0.31× num.",
        measure: Measure::Ratio { a: Kind::Next, b: Kind::Eager, class: "large", metric: Metric::MeanLatency },
        unit: Unit::Ratio,
        rule: Rule::AtMost(0.9),
    },
    Claim {
        id: "large-latency-standalone",
        claim: "Large selectivity: NEXT is faster than Standalone",
        source: "NEXT §6.2.1, Tables 3-4",
        paper: "NEXT/Standalone latency: Tweet 69.83/138.37 s = 0.50× sp., 52.29/124.49 = 0.42× num.; OSMB 0.33× sp., 0.40× num.",
        measure: Measure::Ratio { a: Kind::Next, b: Kind::Standalone, class: "large", metric: Metric::MeanLatency },
        unit: Unit::Ratio,
        rule: Rule::AtMost(0.9),
    },
    Claim {
        id: "medium-latency-best",
        claim: "Medium selectivity: NEXT outperforms every compared index, by 15.5% to 84.9%",
        source: "NEXT §6.2.1, §6.2.3, Tables 3-4",
        paper: "NEXT/best other: Tweet 2.86/3.80 s = 0.75× sp., 5.75/7.47 = 0.77× num.; OSMB 0.85× sp., 0.55× num.",
        measure: Measure::RatioToBest { class: "medium", metric: Metric::MeanLatency },
        unit: Unit::Ratio,
        rule: Rule::AtMost(0.845),
    },
    Claim {
        id: "small-latency-best",
        claim: "Small selectivity: NEXT is comparable to or better than the best compared index",
        source: "NEXT §6.2.3, Tables 3-4",
        paper: "NEXT/best other: Tweet 1.06/0.82 s = 1.29× sp., 0.79/1.19 = 0.66× num.; OSMB 1.63× sp., 0.50× num.",
        measure: Measure::RatioToBest { class: "small", metric: Metric::MeanLatency },
        unit: Unit::Ratio,
        rule: Rule::AtMost(1.65),
    },
    Claim {
        id: "large-latency-best",
        claim: "Large selectivity: NEXT is comparable to or better than the best compared index",
        source: "NEXT §6.2.3, Tables 3-4",
        paper: "NEXT/best other: Tweet 69.83/73.30 s = 0.95× sp., 52.29/49.28 = 1.06× num.; OSMB 0.87× sp., 1.19× num.",
        measure: Measure::RatioToBest { class: "large", metric: Metric::MeanLatency },
        unit: Unit::Ratio,
        rule: Rule::AtMost(1.2),
    },
    Claim {
        id: "next-minimal-blocks",
        claim: "NEXT reads each matching data block once per query (data block read history)",
        source: "NEXT §4 (Query Processing)",
        paper: "1.00× the blocks holding results, by design",
        measure: Measure::OverMinimum { a: Kind::Next },
        unit: Unit::Ratio,
        rule: Rule::AtMost(1.05),
    },
    Claim {
        id: "eager-minimal-blocks",
        claim: "Batched point lookups (sorted keys, one pass) make an index's record fetches read each needed page about once",
        source: "Luo & Carey §6.2, Fig. 10",
        paper: "qualitative: batching is the most effective at avoiding random I/O (no number in text)",
        measure: Measure::OverMinimum { a: Kind::Eager },
        unit: Unit::Ratio,
        rule: Rule::AtMost(1.05),
    },
    Claim {
        id: "ingest-vs-noindex",
        claim: "NEXT adds no significant ingest overhead over no index",
        source: "NEXT §6.2.3, §7 (Fig. 6)",
        paper: "qualitative: \"without introducing significant overhead on insertion\" (Fig. 6 values not in text)",
        measure: Measure::Ingest { a: Kind::Next, b: Kind::NoIndex },
        unit: Unit::Ratio,
        rule: Rule::AtMost(1.5),
    },
    Claim {
        id: "ingest-vs-standalone",
        claim: "NEXT ingest is comparable to Standalone",
        source: "NEXT §6.2.2, Table 5",
        paper: "avg. put NEXT/Standalone: Tweet 17.07/15.16 µs = 1.13×, OSMB 18.74/20.13 = 0.93×",
        measure: Measure::Ingest { a: Kind::Next, b: Kind::Standalone },
        unit: Unit::Ratio,
        rule: Rule::AtMost(1.2),
    },
    Claim {
        id: "index-size-share",
        claim: "NEXT's on-disk index is about a fifth of the primary table, like Standalone's",
        source: "NEXT §6.2.2 (Fig. 7)",
        paper: "20.65% of the primary table (Standalone 20.97%, Embedded 16.13%), OSMB",
        measure: Measure::IndexShare,
        unit: Unit::Percent,
        rule: Rule::AtMost(0.25),
    },
    Claim {
        id: "db-size-vs-standalone",
        claim: "NEXT total database size is comparable to Standalone's",
        source: "NEXT §6.6, Table 5",
        paper: "Tweet 17.23/16.80 GB = 1.03×, OSMB 36.48/38.40 GB = 0.95×",
        measure: Measure::DbSize { a: Kind::Next, b: Kind::Standalone },
        unit: Unit::Ratio,
        rule: Rule::AtMost(1.1),
    },
    Claim {
        id: "ram-share",
        claim: "NEXT's in-RAM global index is under 1% of the data size (per index)",
        source: "NEXT §3.2",
        paper: "< 1% (N/B_s entries of 32 B for 4 KB blocks)",
        measure: Measure::RamShare,
        unit: Unit::Percent,
        rule: Rule::AtMost(0.01),
    },
    Claim {
        id: "ram-vs-eager",
        claim: "NEXT needs far less index RAM than Eager, which keeps the whole index in RAM",
        source: "NEXT §3.2, §6.1",
        paper: "≈ 1/B_s ≈ 0.008× (N/B_s global entries vs N; B_s = 4096/32), derived",
        measure: Measure::Ram { a: Kind::Next, b: Kind::Eager },
        unit: Unit::Ratio,
        rule: Rule::AtMost(0.1),
    },
    Claim {
        id: "topk-vs-full",
        claim: "A top-K query costs less than the full query",
        source: "LevelDB++ §5.2.1, Fig. 10",
        paper: "qualitative: LOOKUP/RANGELOOKUP latency falls with K for Lazy and Embedded (no number in text)",
        measure: Measure::TopK { class: "large" },
        unit: Unit::Ratio,
        rule: Rule::AtMost(0.5),
    },
    Claim {
        id: "delta-reduction",
        claim: "Value-aware splitting (δ) reduces query cost against no splitting",
        source: "NEXT §6.4, Fig. 10",
        paper: "up to 25% lower workload latency",
        measure: Measure::DeltaReduction,
        unit: Unit::Percent,
        rule: Rule::AtLeast(0.125),
    },
    Claim {
        id: "mixed-vs-lsm-indexes",
        claim: "Mixed workloads: NEXT has lower mean operation latency than Standalone and Embedded",
        source: "NEXT §6.3, Figs. 8-9",
        paper: "qualitative (Figs. 8-9, no number in text)",
        measure: Measure::Mixed { a: Kind::Next },
        unit: Unit::Ratio,
        rule: Rule::AtMost(0.9),
    },
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Reproduced,
    NotReproduced,
    NotMeasured,
}

impl Verdict {
    fn as_str(self) -> &'static str {
        match self {
            Verdict::Reproduced => "reproduced",
            Verdict::NotReproduced => "not reproduced",
            Verdict::NotMeasured => "not measured in this run",
        }
    }
}

pub(crate) struct Outcome {
    pub claim: &'static Claim,
    /// Our figure, or why it was not measured.
    pub ours: String,
    #[cfg_attr(not(test), allow(dead_code))]
    pub value: Option<f64>,
    pub verdict: Verdict,
}

/// Every claim of [`CLAIMS`] checked against the run.
pub(crate) fn paper_vs_us(r: &RunResults) -> Vec<Outcome> {
    CLAIMS
        .iter()
        .map(|c| match measure(r, &c.measure, c.unit) {
            Ok((v, text)) => Outcome {
                claim: c,
                ours: format!("{}: {text}", c.measure.describe()),
                value: Some(v),
                verdict: if c.rule.holds(v) {
                    Verdict::Reproduced
                } else {
                    Verdict::NotReproduced
                },
            },
            Err(why) => Outcome {
                claim: c,
                ours: format!("– ({why})"),
                value: None,
                verdict: Verdict::NotMeasured,
            },
        })
        .collect()
}

fn geo_mean(v: &[f64]) -> f64 {
    (v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp()
}

/// "0.97× (user_id 0.95×, coordinates 0.99×)" from per-attribute ratios.
fn summarize(per: &[(String, f64)], unit: Unit) -> (f64, String) {
    let vals: Vec<f64> = per.iter().map(|p| p.1).collect();
    let g = geo_mean(&vals);
    if per.len() == 1 {
        return (g, format!("{} ({})", fmt_value(g, unit), per[0].0));
    }
    let parts: Vec<String> = per
        .iter()
        .map(|(a, v)| format!("{a} {}", fmt_value(*v, unit)))
        .collect();
    (g, format!("{} ({})", fmt_value(g, unit), parts.join(", ")))
}

fn ratio(a: f64, b: f64) -> Option<f64> {
    let v = a / b;
    (a.is_finite() && b.is_finite() && b > 0.0 && v > 0.0 && v.is_finite()).then_some(v)
}

fn measure(r: &RunResults, m: &Measure, unit: Unit) -> Result<(f64, String), String> {
    let attrs = attributes(r);
    match *m {
        Measure::Ratio {
            a,
            b,
            class,
            metric,
        } => {
            let (sa, sb) = (system(r, a)?, system(r, b)?);
            let per: Vec<(String, f64)> = attrs
                .iter()
                .filter_map(|at| {
                    let (qa, qb) = (find(sa, at, class, None)?, find(sb, at, class, None)?);
                    Some((at.clone(), ratio(metric.of(qa), metric.of(qb))?))
                })
                .collect();
            if per.is_empty() {
                return Err(format!(
                    "no {class} query set with {} measured by both",
                    metric.label()
                ));
            }
            Ok(summarize(&per, unit))
        }
        Measure::RatioToBest { class, metric } => {
            let next = system(r, Kind::Next)?;
            let others: Vec<&SystemResult> = r
                .systems
                .iter()
                .filter(|s| {
                    matches!(
                        kind(&s.system),
                        Kind::Eager | Kind::Standalone | Kind::Embedded
                    )
                })
                .collect();
            if others.is_empty() {
                return Err("no Eager, Standalone or Embedded system in this run".into());
            }
            let mut per = Vec::new();
            let mut best_names = Vec::new();
            for at in &attrs {
                let Some(qn) = find(next, at, class, None) else {
                    continue;
                };
                let best = others
                    .iter()
                    .filter_map(|s| Some((s, metric.of(find(s, at, class, None)?))))
                    .filter(|(_, v)| v.is_finite() && *v > 0.0)
                    .min_by(|x, y| x.1.total_cmp(&y.1));
                if let Some((s, v)) = best {
                    if let Some(x) = ratio(metric.of(qn), v) {
                        per.push((at.clone(), x));
                        if !best_names.contains(&s.system) {
                            best_names.push(s.system.clone());
                        }
                    }
                }
            }
            if per.is_empty() {
                return Err(format!(
                    "no {class} query set measured by NEXT and a compared index"
                ));
            }
            let (v, text) = summarize(&per, unit);
            Ok((v, format!("{text}; best other: {}", best_names.join(", "))))
        }
        Measure::Ingest { a, b } => {
            let (sa, sb) = (system(r, a)?, system(r, b)?);
            let t = |s: &SystemResult| s.ingest_seconds + s.settle_seconds;
            let v = ratio(t(sa), t(sb)).ok_or("ingest time not measured")?;
            let cpu = match (sa.ingest_cpu_seconds, sb.ingest_cpu_seconds) {
                (Some(ca), Some(cb)) => ratio(ca, cb)
                    .map(|c| format!("; CPU {:.2}× ({ca:.1} s / {cb:.1} s)", c))
                    .unwrap_or_default(),
                _ => String::new(),
            };
            Ok((
                v,
                format!(
                    "{} ({:.1} s / {:.1} s{cpu})",
                    fmt_value(v, unit),
                    t(sa),
                    t(sb)
                ),
            ))
        }
        Measure::DbSize { a, b } => {
            let (sa, sb) = (system(r, a)?, system(r, b)?);
            let v = ratio(sa.db_bytes as f64, sb.db_bytes as f64)
                .ok_or("database size not measured")?;
            Ok((
                v,
                format!(
                    "{} ({:.1} / {:.1} MB)",
                    fmt_value(v, unit),
                    sa.db_bytes as f64 / 1e6,
                    sb.db_bytes as f64 / 1e6
                ),
            ))
        }
        Measure::IndexShare => {
            let n = system(r, Kind::Next)?;
            let primary = match system(r, Kind::NoIndex) {
                Ok(b) => b.db_bytes as f64,
                Err(_) => n.db_bytes.saturating_sub(n.index_bytes) as f64,
            };
            let v = ratio(n.index_bytes as f64, primary).ok_or("index size not measured")?;
            Ok((
                v,
                format!(
                    "{} ({:.1} MB of {:.1} MB)",
                    fmt_value(v, unit),
                    n.index_bytes as f64 / 1e6,
                    primary / 1e6
                ),
            ))
        }
        Measure::RamShare => {
            let n = system(r, Kind::Next)?;
            let indexes = n
                .queries
                .iter()
                .fold(Vec::new(), |mut v: Vec<&str>, q| {
                    if !v.contains(&q.attribute.as_str()) {
                        v.push(&q.attribute);
                    }
                    v
                })
                .len()
                .max(1);
            let v = ratio(
                n.index_memory_bytes as f64 / indexes as f64,
                n.db_bytes as f64,
            )
            .ok_or("index RAM not measured")?;
            Ok((
                v,
                format!(
                    "{} ({:.2} MB for {indexes} index(es), {:.1} MB of tables)",
                    fmt_value(v, unit),
                    n.index_memory_bytes as f64 / 1e6,
                    n.db_bytes as f64 / 1e6
                ),
            ))
        }
        Measure::Ram { a, b } => {
            let (sa, sb) = (system(r, a)?, system(r, b)?);
            let v = ratio(sa.index_memory_bytes as f64, sb.index_memory_bytes as f64)
                .ok_or("index RAM not measured")?;
            Ok((
                v,
                format!(
                    "{} ({:.2} / {:.2} MB)",
                    fmt_value(v, unit),
                    sa.index_memory_bytes as f64 / 1e6,
                    sb.index_memory_bytes as f64 / 1e6
                ),
            ))
        }
        Measure::OverMinimum { a } => {
            // A system that does not report the minimum is compared with the
            // minimum another system reports for the same set (the same
            // records in the same kind of tables).
            let s = system(r, a)?;
            let mut borrowed = Vec::new();
            let mut worst: Option<(&QueryResult, f64)> = None;
            for q in s.queries.iter().filter(|q| q.top_k.is_none()) {
                let min = minimum(q).or_else(|| {
                    let (from, m) = r
                        .systems
                        .iter()
                        .filter_map(|o| Some((o, minimum(find(o, &q.attribute, &q.class, None)?)?)))
                        .find(|(_, m)| *m > 0.0)?;
                    if !borrowed.contains(&from.system) {
                        borrowed.push(from.system.clone());
                    }
                    Some(m)
                });
                let Some(x) = min.and_then(|m| ratio(q.blocks_read_mean, m)) else {
                    continue;
                };
                if worst.is_none_or(|w| x > w.1) {
                    worst = Some((q, x));
                }
            }
            let (q, v) = worst.ok_or_else(|| {
                format!("{} reports no data blocks or no physical minimum", s.system)
            })?;
            let from = if borrowed.is_empty() {
                String::new()
            } else {
                format!("; minimum as reported by {}", borrowed.join(", "))
            };
            Ok((
                v,
                format!(
                    "{} (worst set: {} {}{from})",
                    fmt_value(v, unit),
                    q.attribute,
                    q.class
                ),
            ))
        }
        Measure::TopK { class } => {
            let n = system(r, Kind::Next)?;
            let k = n
                .queries
                .iter()
                .filter(|q| q.class == class)
                .filter_map(|q| q.top_k)
                .min()
                .ok_or_else(|| format!("no top-K {class} query set"))?;
            let per: Vec<(String, f64)> = attrs
                .iter()
                .filter_map(|at| {
                    let (t, f) = (find(n, at, class, Some(k))?, find(n, at, class, None)?);
                    Some((
                        at.clone(),
                        ratio(Metric::AllBlocks.of(t), Metric::AllBlocks.of(f))?,
                    ))
                })
                .collect();
            if per.is_empty() {
                return Err(format!("no {class} set run both with top-{k} and in full"));
            }
            let (v, text) = summarize(&per, unit);
            Ok((v, format!("{text}, top-{k}")))
        }
        Measure::DeltaReduction => {
            let off = system(r, Kind::NextNoDelta)?;
            let on: Vec<&SystemResult> = r
                .systems
                .iter()
                .filter(|s| kind(&s.system) == Kind::Next)
                .collect();
            if on.is_empty() {
                return Err(format!("no {} system in this run", Kind::Next.label()));
            }
            let mut best: Option<(f64, String)> = None;
            for s in &on {
                for q in s.queries.iter().filter(|q| q.top_k.is_none()) {
                    let Some(base) = find(off, &q.attribute, &q.class, None) else {
                        continue;
                    };
                    let Some(x) = ratio(Metric::AllBlocks.of(q), Metric::AllBlocks.of(base)) else {
                        continue;
                    };
                    if best.as_ref().is_none_or(|b| x < b.0) {
                        best = Some((x, format!("{} {} {}", s.system, q.attribute, q.class)));
                    }
                }
            }
            let (x, at) = best.ok_or("no full query set measured with δ on and off")?;
            let v = 1.0 - x;
            Ok((v, format!("{} at best ({at})", fmt_value(v, unit))))
        }
        Measure::Mixed { a } => {
            let sa = system(r, a)?;
            let mine = mixed_mean(&sa.mixed)
                .ok_or_else(|| format!("{} has no mixed intervals", sa.system))?;
            let best = r
                .systems
                .iter()
                .filter(|s| matches!(kind(&s.system), Kind::Standalone | Kind::Embedded))
                .filter_map(|s| Some((s, mixed_mean(&s.mixed)?)))
                .min_by(|x, y| x.1.total_cmp(&y.1));
            let (s, theirs) =
                best.ok_or("no Standalone or Embedded system with mixed intervals")?;
            let v = ratio(mine, theirs).ok_or("mixed latency not measured")?;
            Ok((
                v,
                format!(
                    "{} ({:.1} / {:.1} µs, vs {})",
                    fmt_value(v, unit),
                    mine,
                    theirs,
                    s.system
                ),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::tests::PNG_SIGNATURE;

    fn q(
        attr: &str,
        class: &str,
        top_k: Option<usize>,
        mean_us: f64,
        blocks: f64,
        idx: f64,
        min: f64,
    ) -> QueryResult {
        QueryResult {
            attribute: attr.into(),
            class: class.into(),
            top_k,
            count: 10,
            mean_us,
            p50_us: mean_us * 0.9,
            p95_us: mean_us * 1.5,
            p99_us: mean_us * 2.0,
            results_mean: min * 1.1,
            blocks_read_mean: blocks,
            min_blocks_mean: min,
            index_blocks_mean: idx,
            stale_mean: 0.0,
            calibrated_mean: min * 1.1,
            mismatches: 0,
            ..Default::default()
        }
    }

    fn sys(
        name: &str,
        ingest: f64,
        db: u64,
        index: u64,
        ram: u64,
        queries: Vec<QueryResult>,
    ) -> SystemResult {
        SystemResult {
            system: name.into(),
            ingest_seconds: ingest,
            settle_seconds: 1.0,
            ingest_cpu_seconds: Some(1.5 * (ingest + 1.0)),
            reopen_seconds: 0.05,
            db_bytes: db,
            index_bytes: index,
            index_memory_bytes: ram,
            write_amplification: 4.5,
            queries,
            mixed: Vec::new(),
            ops: Vec::new(),
            ..Default::default()
        }
    }

    fn interval(ops_done: u64, mean_us: f64) -> MixedInterval {
        MixedInterval {
            ops_done,
            mean_us,
            insert_mean_us: Some(mean_us / 2.0),
            update_mean_us: None,
            query_mean_us: Some(mean_us * 3.0),
            get_mean_us: None,
        }
    }

    fn op(name: &str, count: u64, mean: f64) -> OpSummary {
        OpSummary {
            op: name.into(),
            count,
            ops_per_sec: 1e6 / mean,
            mean_us: mean,
            p50_us: mean * 0.8,
            p95_us: mean * 2.0,
            p99_us: mean * 4.0,
            ..Default::default()
        }
    }

    /// Numbers shaped like docs/benchmarks.md: NEXT reads the minimal data
    /// blocks plus secondary blocks; the in-RAM Eager reads the same data
    /// blocks and no index blocks, and is slightly faster.
    fn sample() -> RunResults {
        let next_q = |idx_small: f64| {
            vec![
                q("user_id", "small", None, 2390.0, 107.9, 16.2, 107.9),
                q("user_id", "medium", None, 12700.0, 1104.0, 19.2, 1104.0),
                q("user_id", "large", None, 118_000.0, 11086.0, 49.0, 11086.0),
                q("user_id", "large", Some(10), 900.0, 10.0, 3.0, 10.0),
                q("coordinates", "small", None, 1670.0, 56.3, idx_small, 56.3),
                q("coordinates", "medium", None, 5150.0, 351.0, 46.2, 351.0),
                q(
                    "coordinates",
                    "large",
                    None,
                    156_000.0,
                    14235.0,
                    102.7,
                    14235.0,
                ),
                q("coordinates", "large", Some(10), 700.0, 10.0, 5.0, 10.0),
            ]
        };
        let mut next = sys(
            "strata:next",
            35.0,
            996_800_000,
            65_200_000,
            8_800_000,
            next_q(43.1),
        );
        next.mixed = vec![
            interval(500, 40.0),
            interval(1000, 55.0),
            interval(1500, 50.0),
        ];
        next.ops = vec![op("insert", 1200, 20.0), op("query", 300, 900.0)];
        let off = sys(
            "strata:next[delta=off]",
            33.0,
            996_600_000,
            65_000_000,
            8_300_000,
            next_q(49.2),
        );
        let mut mem = sys(
            "strata:memory",
            38.0,
            930_800_000,
            0,
            432_000_000,
            vec![
                q("user_id", "small", None, 1250.0, 107.9, 0.0, 107.9),
                q("user_id", "medium", None, 12000.0, 1104.0, 0.0, 1104.0),
                q("user_id", "large", None, 107_000.0, 11086.0, 0.0, 11086.0),
                q("coordinates", "small", None, 730.0, 56.3, 0.0, 56.3),
                q("coordinates", "medium", None, 4090.0, 351.0, 0.0, 351.0),
                q(
                    "coordinates",
                    "large",
                    None,
                    150_000.0,
                    14235.0,
                    0.0,
                    14235.0,
                ),
            ],
        );
        mem.mixed = vec![interval(500, 35.0), interval(1000, 38.0)];
        mem.ops = vec![op("insert", 1100, 15.0)];
        RunResults {
            workload: "static-tweets".into(),
            records: 2_000_000,
            seed: 42,
            direct_io: false,
            mmap_reads: false,
            systems: vec![
                sys("strata:none", 16.3, 930_800_000, 0, 0, Vec::new()),
                next,
                off,
                mem,
            ],
            ..Default::default()
        }
    }

    fn verdict(r: &RunResults, id: &str) -> (Verdict, Option<f64>) {
        let o = paper_vs_us(r);
        let o = o
            .iter()
            .find(|o| o.claim.id == id)
            .unwrap_or_else(|| panic!("claim {id}"));
        (o.verdict, o.value)
    }

    #[test]
    fn kinds_from_system_names() {
        assert_eq!(kind("strata:none"), Kind::NoIndex);
        assert_eq!(kind("strata:next"), Kind::Next);
        assert_eq!(kind("strata:next[delta=0.01]"), Kind::Next);
        assert_eq!(kind("strata:next[delta=off]"), Kind::NextNoDelta);
        assert_eq!(kind("strata:next[foo=1;delta=off]"), Kind::NextNoDelta);
        assert_eq!(kind("strata:memory"), Kind::Eager);
        assert_eq!(kind("rocksdb:composite"), Kind::Standalone);
        assert_eq!(kind("sqlite"), Kind::Other);
        // The registry's grammar: aliases, and a per-index delta is not a
        // NEXT without delta.
        assert_eq!(kind("strata:noindex"), Kind::NoIndex);
        assert_eq!(kind("strata:eager"), Kind::Eager);
        assert_eq!(kind("strata:standalone"), Kind::Standalone);
        assert_eq!(kind("strata:next[delta@user_id=off]"), Kind::Next);
        assert_eq!(kind("strata:embedded[bits_per_key=10]"), Kind::Embedded);
        assert_eq!(kind("strata:next[delta=off"), Kind::Other);
    }

    #[test]
    fn claims_are_well_formed() {
        let mut ids: Vec<&str> = CLAIMS.iter().map(|c| c.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), CLAIMS.len(), "unique ids");
        for c in CLAIMS {
            assert!(
                !c.paper.is_empty() && !c.source.is_empty() && !c.claim.contains('|'),
                "{}",
                c.id
            );
            assert!(!c.paper.contains('|'), "{}", c.id);
        }
    }

    #[test]
    fn verdicts_follow_the_rule() {
        let r = sample();
        // Equal data blocks: NEXT does not read fewer than Eager.
        assert_eq!(
            verdict(&r, "large-data-blocks-eager"),
            (Verdict::NotReproduced, Some(1.0))
        );
        // No Standalone system in the run.
        assert_eq!(
            verdict(&r, "large-data-blocks-standalone").0,
            Verdict::NotMeasured
        );
        assert_eq!(
            verdict(&r, "large-latency-standalone").0,
            Verdict::NotMeasured
        );
        assert_eq!(verdict(&r, "db-size-vs-standalone").0, Verdict::NotMeasured);
        assert_eq!(verdict(&r, "ingest-vs-standalone").0, Verdict::NotMeasured);
        assert_eq!(verdict(&r, "mixed-vs-lsm-indexes").0, Verdict::NotMeasured);
        // NEXT slower than Eager at large: 118/107 and 156/150.
        let (v, x) = verdict(&r, "large-latency-eager");
        assert_eq!(v, Verdict::NotReproduced);
        let want = ((118.0f64 / 107.0) * (156.0 / 150.0)).sqrt();
        assert!((x.unwrap() - want).abs() < 1e-9);
        // ...but within the 1.2× "comparable" bound against the best.
        assert_eq!(verdict(&r, "large-latency-best").0, Verdict::Reproduced);
        assert_eq!(verdict(&r, "medium-latency-best").0, Verdict::NotReproduced);
        // Small: 2390/1250 and 1670/730 → geometric mean 2.09 > 1.65.
        assert_eq!(verdict(&r, "small-latency-best").0, Verdict::NotReproduced);
        assert_eq!(
            verdict(&r, "next-minimal-blocks"),
            (Verdict::Reproduced, Some(1.0))
        );
        assert_eq!(verdict(&r, "eager-minimal-blocks").0, Verdict::Reproduced);
        // (35 + 1) / (16.3 + 1) = 2.08 > 1.5.
        assert_eq!(verdict(&r, "ingest-vs-noindex").0, Verdict::NotReproduced);
        // 65.2 MB / 930.8 MB = 7%.
        let (v, x) = verdict(&r, "index-size-share");
        assert_eq!(v, Verdict::Reproduced);
        assert!((x.unwrap() - 65.2 / 930.8).abs() < 1e-9);
        // 8.8 MB / 2 indexes / 996.8 MB = 0.44%.
        assert_eq!(verdict(&r, "ram-share").0, Verdict::Reproduced);
        let (v, x) = verdict(&r, "ram-vs-eager");
        assert_eq!(v, Verdict::Reproduced);
        assert!((x.unwrap() - 8.8 / 432.0).abs() < 1e-9);
        assert_eq!(verdict(&r, "topk-vs-full").0, Verdict::Reproduced);
        // δ: best is coordinates small, (56.3 + 43.1) / (56.3 + 49.2) → 5.8%.
        let (v, x) = verdict(&r, "delta-reduction");
        assert_eq!(v, Verdict::NotReproduced);
        assert!((x.unwrap() - (1.0 - 99.4 / 105.5)).abs() < 1e-9);

        // Without the Eager and δ=off systems those claims are not measured.
        let mut r2 = sample();
        r2.systems.retain(|s| s.system == "strata:next");
        for id in [
            "large-data-blocks-eager",
            "ram-vs-eager",
            "delta-reduction",
            "medium-latency-best",
            "ingest-vs-noindex",
        ] {
            assert_eq!(verdict(&r2, id).0, Verdict::NotMeasured, "{id}");
        }
        // Index share falls back to NEXT's tables minus its index.
        assert_eq!(verdict(&r2, "index-size-share").0, Verdict::Reproduced);

        // A Standalone that reads twice the data blocks makes the claim hold.
        let mut r3 = sample();
        let mut st = r3.systems[3].clone();
        st.system = "peer:composite".into();
        for q in &mut st.queries {
            q.blocks_read_mean *= 2.0;
            q.mean_us *= 3.0;
        }
        st.mixed = vec![interval(500, 80.0), interval(1000, 90.0)];
        r3.systems.push(st);
        assert_eq!(
            verdict(&r3, "large-data-blocks-standalone"),
            (Verdict::Reproduced, Some(0.5))
        );
        assert_eq!(
            verdict(&r3, "large-latency-standalone").0,
            Verdict::Reproduced
        );
        assert_eq!(verdict(&r3, "mixed-vs-lsm-indexes").0, Verdict::Reproduced);

        // Eager without a reported minimum: compared with NEXT's minimum.
        let mut r4 = sample();
        for q in &mut r4.systems[3].queries {
            q.min_blocks_mean = 0.0;
        }
        let o = paper_vs_us(&r4);
        let e = o
            .iter()
            .find(|o| o.claim.id == "eager-minimal-blocks")
            .unwrap();
        assert_eq!((e.verdict, e.value), (Verdict::Reproduced, Some(1.0)));
        assert!(
            e.ours.contains("minimum as reported by strata:next"),
            "{}",
            e.ours
        );
        for q in &mut r4.systems[3].queries {
            q.blocks_read_mean *= 1.2;
        }
        assert_eq!(
            verdict(&r4, "eager-minimal-blocks").0,
            Verdict::NotReproduced
        );
    }

    #[test]
    fn report_has_every_section_and_plots() {
        let dir = tempfile::tempdir().unwrap();
        let r = sample();
        let path = write_report(&r, dir.path()).unwrap();
        let md = std::fs::read_to_string(&path).unwrap();
        for section in [
            "# Strata benchmark: static-tweets",
            "## Ingest and size",
            "| ingest CPU s |",
            "the no-index baseline, CPU ",
            "## user_id: mean latency (ms) / p99 (ms)",
            "## coordinates: data blocks read per query",
            "## Operations",
            "| strata:next | query | 300 |",
            "## Mixed workload",
            "Correctness: 0 queries returned a result count different from the exact count computed over the generated data (220 queries checked: OK).",
            "## Paper vs us",
            "| large top-10 |",
            "not measured in this run",
            "not reproduced",
            "| reproduced |",
            "NEXT §6.2.1, Tables 3-4",
        ] {
            assert!(md.contains(section), "missing {section:?} in\n{md}");
        }
        // One table row per claim.
        let rows = md
            .lines()
            .filter(|l| {
                CLAIMS
                    .iter()
                    .any(|c| l.starts_with(&format!("| {} |", c.claim)))
            })
            .count();
        assert_eq!(rows, CLAIMS.len());
        for f in [
            "latency_user_id.png",
            "latency_coordinates.png",
            "blocks_user_id.png",
            "blocks_coordinates.png",
            "ingest.png",
            "mixed.png",
        ] {
            assert!(md.contains(&format!("]({f})")), "{f} embedded");
            let png = std::fs::read(dir.path().join(f)).unwrap();
            assert_eq!(&png[..8], &PNG_SIGNATURE, "{f}");
            let (w, h, _) = crate::plot::tests::decode(&png);
            assert!(
                w >= CHART_W as usize && h == CHART_H as usize,
                "{f}: {w}x{h}"
            );
        }
    }

    #[test]
    fn plots_without_data_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = sample();
        r.systems.retain(|s| s.system == "strata:none");
        let md = std::fs::read_to_string(write_report(&r, dir.path()).unwrap()).unwrap();
        assert!(dir.path().join("ingest.png").exists());
        for f in ["mixed.png", "latency_user_id.png", "blocks_user_id.png"] {
            assert!(!dir.path().join(f).exists(), "{f}");
            assert!(!md.contains(f));
        }
        assert!(!md.contains("## Operations") && !md.contains("## Mixed workload"));
        assert!(md.contains("## Paper vs us"));
    }
}
