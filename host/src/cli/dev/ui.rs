//! What `operon dev` shows: spinners with elapsed time for the slow steps,
//! log lines, and a status table redrawn in place on a terminal. On a
//! non-terminal (CI, a pipe) everything is plain lines, and the table is
//! printed again only when it changes, so a log stays readable.

use indicatif::{ProgressBar, ProgressStyle};
use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The output of one `operon dev`. Cheap to clone.
#[derive(Clone)]
pub struct Ui {
    terminal: bool,
    table: Arc<Mutex<Table>>,
}

#[derive(Default)]
struct Table {
    /// The last table shown.
    lines: Vec<String>,
    /// What decides, off a terminal, whether the table changed.
    key: Vec<String>,
    /// How many lines of it are on screen below the cursor's line start
    /// (terminal only), to erase before printing anything else.
    drawn: usize,
}

impl Ui {
    /// Output to stdout, redrawn in place when stdout is a terminal (`color`:
    /// whether escapes may be written, see `--color`).
    pub fn new(color: crate::cli::Color) -> Ui {
        Ui { terminal: color.enabled(std::io::stdout().is_terminal()), table: Arc::default() }
    }

    /// Whether stdout is a terminal.
    pub fn terminal(&self) -> bool {
        self.terminal
    }

    /// Print a line above the table (which is redrawn below it).
    pub fn line(&self, text: impl AsRef<str>) {
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = std::io::stdout().lock();
        if self.terminal {
            erase(&mut out, table.drawn);
            let _ = writeln!(out, "{}", text.as_ref());
            for l in &table.lines {
                let _ = writeln!(out, "{l}");
            }
            table.drawn = table.lines.len();
        } else {
            let _ = writeln!(out, "{}", text.as_ref());
        }
        let _ = out.flush();
    }

    /// Show the table: in place on a terminal; otherwise printed only when
    /// `key` (the table without its ever-changing counters) differs from
    /// the last one.
    pub fn table(&self, lines: Vec<String>, key: Vec<String>) {
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = std::io::stdout().lock();
        if self.terminal {
            erase(&mut out, table.drawn);
            for l in &lines {
                let _ = writeln!(out, "{l}");
            }
            table.drawn = lines.len();
        } else if key != table.key {
            for l in &lines {
                let _ = writeln!(out, "{l}");
            }
            let _ = writeln!(out);
            table.key = key;
        }
        table.lines = lines;
        let _ = out.flush();
    }

    /// Leave the table on screen as it is: later output goes below it.
    pub fn release_table(&self) {
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        table.drawn = 0;
        table.lines.clear();
    }

    /// Run a slow step with a spinner showing `what`, the last progress line
    /// and the elapsed time (plain lines on a non-terminal). Prints the
    /// outcome with the time taken.
    pub fn step<T, E: std::fmt::Display>(
        &self,
        what: &str,
        work: impl FnOnce(&mut dyn FnMut(&str)) -> Result<T, E>,
    ) -> Result<T, E> {
        let start = Instant::now();
        let bar = if self.terminal {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("{spinner} {prefix} [{elapsed}] {wide_msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.set_prefix(what.to_string());
            bar.enable_steady_tick(Duration::from_millis(120));
            Some(bar)
        } else {
            self.line(format!("{what}…"));
            None
        };
        let mut progress = |line: &str| match &bar {
            Some(bar) => bar.set_message(line.to_string()),
            None => self.line(format!("  {what}: {line}")),
        };
        let result = work(&mut progress);
        if let Some(bar) = &bar {
            bar.finish_and_clear();
        }
        let secs = start.elapsed().as_secs_f64();
        match &result {
            Ok(_) => self.line(format!("✓ {what} ({secs:.1}s)")),
            Err(e) => self.line(format!("✗ {what} ({secs:.1}s): {e}")),
        }
        result
    }
}

fn erase(out: &mut impl Write, lines: usize) {
    if lines > 0 {
        let _ = write!(out, "\x1b[{lines}A\x1b[J");
    }
}
