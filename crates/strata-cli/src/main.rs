//! `strata`: the command line of the Strata engine.
//!
//! Exit codes: 0 success; 1 `get` of a missing key, or `verify` found a
//! state that no acceptable history explains; 2 any error (engine error,
//! unreadable file, bad input found after parsing). Bad command-line syntax
//! is reported by clap (exit 2).

mod bench_args;
mod gen;
mod index_cmd;
mod inspect;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use strata::{Db, Options, StrategyKind, WriteOptions};
use strata_harness::stress::{self, Workload};
use strata_harness::{db_bench, report, run as bench_run, verify};

#[derive(Parser, Debug)]
#[command(
    name = "strata",
    version,
    about = "Command line for the Strata LSM-tree key-value engine",
    after_help = "Exit status: 0 on success; 1 when `get` finds no value or `verify` \
                  finds a mismatch; 2 on any error."
)]
struct Cli {
    /// Database directory (required by every command except `bench`).
    #[arg(long, global = true, value_name = "DIR")]
    db: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Store VALUE under KEY (creates the database if missing).
    Put {
        key: String,
        value: String,
        /// fsync the WAL before returning.
        #[arg(long)]
        sync: bool,
    },
    /// Print the value of KEY; exit 1 with `not found: KEY` on stderr if absent.
    Get { key: String },
    /// Delete KEY (creates the database if missing).
    Del {
        key: String,
        /// fsync the WAL before returning.
        #[arg(long)]
        sync: bool,
    },
    /// Print `key<TAB>value` lines in key order (bytes shown lossily as UTF-8).
    Scan {
        /// First key (inclusive).
        #[arg(long, value_name = "K")]
        from: Option<String>,
        /// End key (exclusive).
        #[arg(long, value_name = "K")]
        to: Option<String>,
        /// Print at most N entries.
        #[arg(long, value_name = "N")]
        limit: Option<u64>,
    },
    /// Show levels, files, block reads, Bloom filter and write counters.
    ///
    /// Counters start at zero when the database is opened, so they cover
    /// what opening it (WAL replay) did.
    Stats {
        /// Print the engine's `Stats` as pretty JSON.
        #[arg(long)]
        json: bool,
    },
    /// Flush, then compact the whole key range down to one level.
    Compact,
    /// Deterministic random writes for crash testing
    ///
    /// Operation i is a function of (--seed, i, --keys, --value-size) only:
    /// ~55% put, ~20% delete, ~25% atomic batch of 2-8 puts/deletes, over keys
    /// k000000..k{K-1}. After each write returns, one line is printed and
    /// stdout flushed:
    ///   ok <i> put <key> <digest>
    ///   ok <i> del <key>
    ///   ok <i> batch <n> put <key> <digest> del <key> ...
    /// where <digest> is the FNV-1a 64 of the value in 16 hex digits.
    /// Feed that output to `verify` with the same parameters.
    ///
    /// With --threads N --seconds S instead of --ops: N/2 writers change
    /// indexed JSON records (indexes `u` and `c` of --index-strategy,
    /// default next) while the other threads query and check every answer
    /// against a scan of the snapshot it was given at. Prints the counts;
    /// exit 1 on any violation.
    #[command(verbatim_doc_comment)]
    Stress {
        #[command(flatten)]
        workload: WorkloadArgs,
        /// Number of operations (the deterministic crash workload).
        #[arg(
            long,
            value_name = "N",
            required_unless_present = "threads",
            conflicts_with = "threads"
        )]
        ops: Option<u64>,
        /// Concurrent mode: writer and reader threads in all (at least 2).
        #[arg(long, value_name = "N", requires = "seconds",
              value_parser = clap::value_parser!(u64).range(2..))]
        threads: Option<u64>,
        /// Concurrent mode: how long to run.
        #[arg(long, value_name = "S")]
        seconds: Option<f64>,
        /// fsync the WAL before acknowledging each operation.
        #[arg(long)]
        sync: bool,
        /// Use tiny memtables and levels (Options::small_for_tests) so that
        /// flushes and compactions happen every few kilobytes.
        #[arg(long)]
        small: bool,
    },
    /// Check a database against the acknowledged output of `stress`
    ///
    /// Expected state = --base-state (or empty) + every complete line of
    /// --acked in order (a final line cut by a kill is ignored). The database
    /// must hold exactly that state, or that state plus the next, never
    /// acknowledged operation (regenerated from the workload parameters,
    /// which must be the stress run's), applied atomically. The whole
    /// database is scanned, and every key is also read with get and
    /// multi_get; all three must agree.
    ///
    /// State files (--base-state, --write-state) hold one `key<TAB>digest`
    /// line per live key, sorted by key; empty and `#` lines are ignored.
    /// For repeated crash cycles on one database, pass the previous cycle's
    /// --write-state file as the next cycle's --base-state.
    ///
    /// Prints `verified N keys and I indexes, M ops acknowledged, next op applied: yes|no`
    /// on success; exits 1 listing the mismatched keys otherwise.
    #[command(verbatim_doc_comment)]
    Verify {
        /// Output of the stress run (may end with a partial line).
        #[arg(long, value_name = "FILE")]
        acked: PathBuf,
        #[command(flatten)]
        workload: WorkloadArgs,
        /// State of the database before the stress run (default: empty).
        #[arg(long, value_name = "FILE")]
        base_state: Option<PathBuf>,
        /// After a successful check, write the database's state here.
        #[arg(long, value_name = "FILE")]
        write_state: Option<PathBuf>,
        /// Accept the state after any prefix of the operations (0 ..= acked+1),
        /// for runs without --sync.
        #[arg(long)]
        prefix: bool,
    },
    /// The main demo: generate tweets, load them with and without secondary
    /// indexes, run calibrated queries, print a comparison and write a
    /// report (results.json, report.md with PNG plots) to --out.
    Demo {
        /// Tweets to generate (the default finishes in about two minutes).
        #[arg(long, default_value_t = 50_000)]
        records: u64,
        /// Queries per query set (the Embedded index reads every block for
        /// ranges and windows, which bounds the default).
        #[arg(long, default_value_t = 30)]
        queries: usize,
        /// Report directory.
        #[arg(long, default_value = "strata-demo")]
        out: PathBuf,
    },
    /// Manage secondary indexes.
    Index {
        #[command(subcommand)]
        cmd: index_cmd::IndexCommand,
    },
    /// Bulk-load JSONL or CSV records (a later line is newer).
    Load(index_cmd::LoadArgs),
    /// Query an index; prints one JSON object per line, newest first.
    Query(index_cmd::QueryArgs),
    /// Verify every index against a full scan; exit 1 on any mismatch.
    Check,
    /// db_bench-style benchmark: random fill, random reads, multi_gets.
    ///
    /// Fills --records keys in random order (--sequential: in key order,
    /// db_bench's fillseq; keys are zero-padded decimal
    /// numbers of --key-size bytes, written in batches of --batch), flushes
    /// and waits for compactions, then does --reads random gets of existing
    /// keys and --multigets multi_gets of 16 random keys. Reports ops/s and
    /// MB/s per phase, write and space amplification, data blocks per get,
    /// Bloom probes and per-level files/bytes. Without --db it runs in a
    /// temporary directory that is removed afterwards; with --db the
    /// directory must not already hold a database.
    #[command(args_conflicts_with_subcommands = true)]
    Bench {
        /// `run`, `replay`, `trace`: the papers' experiments (see
        /// `strata bench run --help`).
        #[command(subcommand)]
        sub: Option<BenchCommand>,
        /// Keys to fill.
        #[arg(long, value_name = "N", default_value_t = 100_000)]
        records: u64,
        /// Random reads (default: --records).
        #[arg(long, value_name = "N")]
        reads: Option<u64>,
        /// multi_gets of 16 keys (default: --records / 16).
        #[arg(long, value_name = "N")]
        multigets: Option<u64>,
        /// Puts per write batch during the fill.
        #[arg(long, value_name = "N", default_value_t = 16)]
        batch: usize,
        /// Bytes per value (pseudo-random, incompressible).
        #[arg(long, value_name = "B", default_value_t = 500)]
        value_size: usize,
        /// Bytes per key (zero-padded decimal).
        #[arg(long, value_name = "B", default_value_t = 16)]
        key_size: usize,
        /// Use Options::paper() (64 MiB memtable and cache) instead of the
        /// defaults.
        #[arg(long)]
        paper: bool,
        /// Fill in key order (db_bench's fillseq) instead of random order.
        #[arg(long)]
        sequential: bool,
        /// Print the results as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Generate a benchmark data set (JSONL) and calibrated query sets.
    Gen(gen::GenArgs),
    /// Show what a table file holds: level (from the MANIFEST beside it),
    /// entries, key and sequence ranges, data blocks, Bloom filter and
    /// every meta block with its size and what it holds (NEXT secondary
    /// blocks and directory, Embedded zone maps, update memo).
    Sst {
        /// The table (`NNNNNN.sst`).
        file: PathBuf,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Print the version edits of a database's MANIFEST, one per line.
    Manifest {
        /// The database directory.
        dir: PathBuf,
        /// One JSON object per edit.
        #[arg(long)]
        json: bool,
    },
    /// Print the records of a write-ahead log file: each batch with its
    /// sequence numbers and operations.
    Wal {
        /// The log (`NNNNNN.log`).
        file: PathBuf,
        /// One JSON object per record.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
enum BenchCommand {
    /// Run a workload on every system of --systems (static: load, then the
    /// calibrated query sets; mixed: preload, then interleaved inserts,
    /// updates, gets and queries); write DIR/results.json and report.md
    /// and print a table. Exit 1 if any result count was wrong.
    Run(bench_args::RunArgs),
    /// Replay a trace file (chirp) on every system of --systems; results
    /// as for `run`.
    Replay(bench_args::ReplayArgs),
    /// Write a mixed workload of generated tweets as a chirp trace (fields
    /// ID and UserID), for `bench replay`.
    Trace(bench_args::TraceArgs),
}

/// Parameters of the deterministic stress workload.
#[derive(Args, Debug, Clone, Copy)]
struct WorkloadArgs {
    /// Workload seed (`verify` must be given the one `stress` used).
    #[arg(long, value_name = "S", default_value_t = 1)]
    seed: u64,
    /// Size of the key space (keys k000000..k{K-1}).
    #[arg(long, value_name = "K", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..))]
    keys: u64,
    /// Bytes per value.
    #[arg(long, value_name = "B", default_value_t = 100)]
    value_size: usize,
    /// Write JSON records whose attributes change with every write, with
    /// indexes `u` (i64) and `c` (point) of this strategy (stress creates
    /// them; verify checks every index against a full scan). Give it to
    /// verify too: it decides what the values are.
    #[arg(long, value_name = "STRATEGY", value_parser = parse_strategy)]
    index_strategy: Option<StrategyKind>,
}

fn parse_strategy(s: &str) -> Result<StrategyKind, String> {
    StrategyKind::parse(s).map_err(|e| e.to_string())
}

impl From<WorkloadArgs> for Workload {
    fn from(a: WorkloadArgs) -> Workload {
        Workload {
            seed: a.seed,
            keys: a.keys,
            value_size: a.value_size,
            index_strategy: a.index_strategy,
        }
    }
}

/// Why a command failed.
#[derive(Debug)]
pub enum CliError {
    /// An engine error: `error: <message>`, exit 2.
    Db(strata::Error),
    /// Any other error: `error: <message>`, exit 2.
    Other(String),
    /// A check failed (message printed as is), exit 1.
    Failed(String),
    /// `get` found nothing, exit 1.
    NotFound(String),
    /// stdout was closed by the reader (e.g. `| head`): stop quietly.
    BrokenPipe,
}

impl From<strata::Error> for CliError {
    fn from(e: strata::Error) -> Self {
        CliError::Db(e)
    }
}

impl From<strata_harness::Error> for CliError {
    fn from(e: strata_harness::Error) -> Self {
        match e {
            strata_harness::Error::Db(e) => CliError::Db(e),
            strata_harness::Error::Other(m) => CliError::Other(m),
            strata_harness::Error::Failed(m) => CliError::Failed(m),
        }
    }
}

/// Writes to stdout and flushes, mapping failures to [`CliError`].
pub fn out(args: std::fmt::Arguments<'_>) -> Result<(), CliError> {
    let mut o = std::io::stdout().lock();
    o.write_fmt(args).and_then(|_| o.flush()).map_err(io_out)
}

fn io_out(e: std::io::Error) -> CliError {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        CliError::BrokenPipe
    } else {
        CliError::Other(format!("write to stdout: {e}"))
    }
}

/// Every strategy, side by side, in `strata demo`.
const DEMO_SYSTEMS: &str =
    "strata:none,strata:next,strata:embedded,strata:memory,strata:composite,\
strata:composite[mode=validation],strata:deli,strata:posting-eager,strata:posting-lazy,strata:filter";

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError::Db(e)) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
        Err(CliError::Other(m)) => {
            eprintln!("error: {m}");
            ExitCode::from(2)
        }
        Err(CliError::Failed(m)) => {
            eprintln!("{m}");
            ExitCode::from(1)
        }
        Err(CliError::NotFound(k)) => {
            eprintln!("not found: {k}");
            ExitCode::from(1)
        }
        Err(CliError::BrokenPipe) => ExitCode::SUCCESS,
    }
}

fn require_db(db: &Option<PathBuf>) -> Result<&Path, CliError> {
    db.as_deref()
        .ok_or_else(|| CliError::Other("--db DIR is required for this command".into()))
}

fn open_existing(dir: &Path) -> Result<Db, CliError> {
    Ok(Db::open(dir, Options::default().create_if_missing(false))?)
}

fn run(cli: Cli) -> Result<(), CliError> {
    let db_dir = cli.db;
    let dir = || require_db(&db_dir);
    match cli.command {
        Command::Gen(args) => gen::run(args).map_err(CliError::Other)?,
        Command::Sst { file, json } => inspect::run_sst(&file, json)?,
        Command::Manifest { dir, json } => inspect::run_manifest(&dir, json)?,
        Command::Wal { file, json } => inspect::run_wal(&file, json)?,
        Command::Bench {
            sub: Some(BenchCommand::Run(args)),
            ..
        } => print_outcome(&bench_run::run(&args.into())?)?,
        Command::Bench {
            sub: Some(BenchCommand::Replay(args)),
            ..
        } => print_outcome(&bench_run::replay(&args.into())?)?,
        Command::Bench {
            sub: Some(BenchCommand::Trace(args)),
            ..
        } => {
            let out_file = args.out.clone();
            let t = bench_run::trace(&args.into())?;
            out(format_args!(
                "wrote {} lines to {} ({} preload writes, then {} inserts, {} updates, {} rp, {} rs)\n",
                t.lines,
                out_file.display(),
                t.preload,
                t.counts["insert"],
                t.counts["update"],
                t.counts["get"],
                t.counts["query"]
            ))?;
        }
        Command::Bench {
            sub: None,
            records,
            reads,
            multigets,
            batch,
            value_size,
            key_size,
            paper,
            sequential,
            json,
        } => out(format_args!(
            "{}",
            db_bench::run(&db_bench::BenchArgs {
                records,
                sequential,
                reads: reads.unwrap_or(records),
                multigets: multigets.unwrap_or(records / 16),
                batch,
                value_size,
                key_size,
                paper,
                db: db_dir.clone(),
                json,
            })?
        ))?,
        Command::Demo {
            records,
            queries,
            out: dir,
        } => {
            out(format_args!(
                "Strata demo: {records} generated tweets, secondary indexes on user_id (i64) and coordinates (point),\n\
                 loaded without an index and with every index strategy in turn (NEXT, Embedded, the in-RAM\n\
                 Eager baseline, composite sync and validation, DELI, posting lists eager and lazy); then\n\
                 {queries} queries per selectivity class (small/medium/large, calibrated to the NEXT paper's\n\
                 mean result counts), in full and top-10.\n\n"
            ))?;
            print_outcome(&bench_run::run(&bench_run::RunConfig {
                queries,
                systems: Some(DEMO_SYSTEMS.into()),
                top_k: "10".into(),
                ..bench_run::RunConfig::new("static-tweets", records, dir)
            })?)?;
        }
        Command::Index { cmd } => {
            let create = matches!(cmd, index_cmd::IndexCommand::Create { .. });
            let db = if create {
                Db::open(dir()?, Options::default())?
            } else {
                index_cmd::open(dir()?)?
            };
            index_cmd::run_index(&db, cmd)?;
        }
        Command::Load(args) => {
            // Checked before the database is opened (and maybe created): a
            // missing input leaves no empty database behind.
            if !args.file.is_file() {
                return Err(CliError::Other(format!(
                    "{} is not a readable file",
                    args.file.display()
                )));
            }
            let db = Db::open(dir()?, Options::default())?;
            index_cmd::run_load(&db, &args)?;
        }
        Command::Query(q) => index_cmd::run_query(&index_cmd::open(dir()?)?, &q)?,
        Command::Check => index_cmd::run_check(&index_cmd::open(dir()?)?)?,
        Command::Put { key, value, sync } => {
            let db = Db::open(dir()?, Options::default())?;
            db.put_opt(
                key.as_bytes(),
                value.as_bytes(),
                WriteOptions::default().sync(sync),
            )?;
        }
        Command::Get { key } => {
            let db = open_existing(dir()?)?;
            match db.get(key.as_bytes())? {
                Some(v) => {
                    let mut o = std::io::stdout().lock();
                    o.write_all(&v)
                        .and_then(|_| o.write_all(b"\n"))
                        .and_then(|_| o.flush())
                        .map_err(io_out)?;
                }
                None => return Err(CliError::NotFound(key)),
            }
        }
        Command::Del { key, sync } => {
            let db = Db::open(dir()?, Options::default())?;
            db.delete_opt(key.as_bytes(), WriteOptions::default().sync(sync))?;
        }
        Command::Scan { from, to, limit } => {
            let db = open_existing(dir()?)?;
            let mut o = std::io::BufWriter::new(std::io::stdout().lock());
            let iter = db.iter(
                from.as_deref().map(str::as_bytes),
                to.as_deref().map(str::as_bytes),
            )?;
            for item in iter.take(limit.map_or(usize::MAX, |l| l.min(usize::MAX as u64) as usize)) {
                let (k, v) = item?;
                writeln!(
                    o,
                    "{}\t{}",
                    String::from_utf8_lossy(&k),
                    String::from_utf8_lossy(&v)
                )
                .map_err(io_out)?;
            }
            o.flush().map_err(io_out)?;
        }
        Command::Stats { json } => {
            let db = open_existing(dir()?)?;
            let stats = db.stats();
            if json {
                let s = serde_json::to_string_pretty(&stats)
                    .map_err(|e| CliError::Other(format!("serialize stats: {e}")))?;
                out(format_args!("{s}\n"))?;
            } else {
                out(format_args!("{}", stats_table(&stats)))?;
            }
        }
        Command::Compact => {
            let db = open_existing(dir()?)?;
            db.compact_range(None, None)?;
        }
        Command::Stress {
            workload,
            ops,
            threads: Some(threads),
            seconds,
            sync: _,
            small,
        } => {
            let _ = ops;
            let seconds = seconds.unwrap_or(10.0);
            if !(seconds.is_finite() && seconds > 0.0) {
                return Err(CliError::Other(format!(
                    "--seconds must be a positive number, not {seconds}"
                )));
            }
            let strategy = workload.index_strategy.unwrap_or(StrategyKind::Next);
            let r = strata_harness::concurrent::run(
                dir()?,
                strata_harness::concurrent::ConcurrentArgs {
                    threads: threads as usize,
                    duration: std::time::Duration::from_secs_f64(seconds),
                    strategy,
                    keys: workload.keys,
                    seed: workload.seed,
                    small,
                },
            )?;
            let mut s = format!(
                "{}: {threads} threads, {seconds} s: {} writes, {} queries checked, {} violations\n",
                strategy.name(),
                r.writes,
                r.queries,
                r.violations
            );
            for e in &r.examples {
                s.push_str(&format!("  {e}\n"));
            }
            out(format_args!("{s}"))?;
            if r.violations > 0 {
                return Err(CliError::Failed(format!("{} violations", r.violations)));
            }
        }
        Command::Stress {
            workload,
            ops,
            threads: None,
            seconds: _,
            sync,
            small,
        } => {
            let ops = ops.unwrap_or(0);
            let mut o = std::io::stdout().lock();
            stress::run(dir()?, workload.into(), ops, sync, small, &mut o).map_err(|e| match e {
                stress::StressError::Db(e) => CliError::from(e),
                stress::StressError::Output(e) => io_out(e),
            })?
        }
        Command::Verify {
            acked,
            workload,
            base_state,
            write_state,
            prefix,
        } => {
            let v = verify::run(
                dir()?,
                &verify::VerifyArgs {
                    acked,
                    workload: workload.into(),
                    base_state,
                    write_state,
                    prefix,
                },
            )?;
            let mut s = format!(
                "verified {} keys and {} indexes, {} ops acknowledged, next op applied: {}\n",
                v.keys_checked,
                v.indexes_checked,
                v.acked,
                if v.applied > v.acked { "yes" } else { "no" }
            );
            if prefix {
                s.push_str(&format!(
                    "recovered prefix: {} ops ({} acknowledged ops lost)\n",
                    v.applied,
                    v.acked.saturating_sub(v.applied)
                ));
            }
            if v.partial_line {
                s.push_str("(a partial last line was ignored)\n");
            }
            for (name, why) in &v.rebuilt_at_open {
                s.push_str(&format!(
                    "warning: index {name} was rebuilt from the data at open: {why}\n"
                ));
            }
            out(format_args!("{s}"))?;
        }
    }
    Ok(())
}

/// Prints a run's tables and output paths; fails (exit 1) after printing
/// them if any result count was wrong.
fn print_outcome(o: &bench_run::Outcome) -> Result<(), CliError> {
    out(format_args!("{}", report::table(&o.results)))?;
    if o.mixed {
        out(format_args!("{}", report::ops_table(&o.results)))?;
    }
    out(format_args!(
        "results: {}\nreport:  {}\n",
        o.results_path.display(),
        o.report_path.display()
    ))?;
    Ok(o.check()?)
}

/// The human-readable `stats` output.
fn stats_table(s: &strata::Stats) -> String {
    let io = &s.io;
    let mut t = db_bench::level_table(s);
    let pct = |a: u64, b: u64| {
        if b == 0 {
            0.0
        } else {
            100.0 * a as f64 / b as f64
        }
    };
    t.push_str(&format!(
        "memtable: {} B ({} immutable), index side {} B, key filters {} B   block cache: {} B   last sequence: {}\n",
        s.memtable_bytes,
        s.immutable_memtables,
        s.memtable_side_bytes,
        s.memtable_filter_bytes,
        s.block_cache_bytes,
        s.last_sequence
    ));
    t.push_str("block reads       disk      cache\n");
    for (name, b) in [
        ("data", io.data_blocks),
        ("index", io.index_blocks),
        ("filter", io.filter_blocks),
        ("meta", io.meta_blocks),
    ] {
        t.push_str(&format!("  {name:<8} {:>10} {:>10}\n", b.disk, b.cache));
    }
    t.push_str(&format!("bytes read (queries): {}\n", io.bytes_read));
    t.push_str(&format!(
        "bloom: {} probes, {} negatives ({:.1}%)\n",
        io.bloom_probes,
        io.bloom_negatives,
        pct(io.bloom_negatives, io.bloom_probes)
    ));
    t.push_str(&format!(
        "bytes written: user {}, WAL {}, flush {}, compaction {} (compaction read {})\n",
        io.user_bytes_written,
        io.wal_bytes_written,
        io.flush_bytes_written,
        io.compaction_bytes_written,
        io.compaction_bytes_read
    ));
    t.push_str(&format!(
        "flushes: {}   compactions: {}   write stalls: {} us\n",
        io.flushes, io.compactions, io.write_stall_micros
    ));
    t.push_str(&format!(
        "write amplification: {:.2}\n",
        s.write_amplification
    ));
    t
}
