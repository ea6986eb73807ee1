//! Where log lines go and how a line looks: standard error, or a file
//! (oslo.log's `log_file`/`log_dir`) reopened on SIGHUP so that logrotate
//! can move it away; text, JSON, or oslo.log's own line for tools that
//! parse Placement's logs (kolla's fluentd).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, MakeWriter};
use tracing_subscriber::registry::LookupSpan;

/// The log target of request lines: Placement's logger name, so that a
/// filter or a grep written for `placement.requestlog` finds them (the
/// pipeline logs them; the oslo format writes them as Placement does).
pub const REQUEST_LOG_TARGET: &str = "placement::requestlog";

/// oslo.log's file: `log_dir/log_file`, `log_file` alone, or
/// `log_dir/placement.log` (oslo.log names it after the program).
pub fn file_path(log_file: Option<&Path>, log_dir: Option<&Path>) -> Option<PathBuf> {
    match (log_file, log_dir) {
        (Some(f), Some(d)) => Some(d.join(f)),
        (Some(f), None) => Some(f.to_path_buf()),
        (None, Some(d)) => Some(d.join("placement.log")),
        (None, None) => None,
    }
}

/// A log file that can be reopened at its path.
#[derive(Clone)]
pub struct LogFile {
    path: Arc<PathBuf>,
    file: Arc<Mutex<File>>,
}

impl LogFile {
    /// Opens (creating, appending) the file.
    pub fn open(path: &Path) -> Result<LogFile, String> {
        let file = open_append(path)?;
        Ok(LogFile {
            path: Arc::new(path.to_path_buf()),
            file: Arc::new(Mutex::new(file)),
        })
    }

    /// Opens the path again (after logrotate moved the file away); on an
    /// error the old file is kept and the error returned.
    pub fn reopen(&self) -> Result<(), String> {
        let fresh = open_append(&self.path)?;
        let mut held = self.file.lock().unwrap_or_else(|p| p.into_inner());
        *held = fresh;
        Ok(())
    }

    /// The path it writes to.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Appends, creating the file readable by its owner and group only. The
/// last component is never a symbolic link followed (O_NOFOLLOW): a
/// server started as root must not write through a link that another
/// user planted in a log folder they can write to.
fn open_append(path: &Path) -> Result<File, String> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o640)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| format!("log file {}: {e}", path.display()))
}

/// One line written whole under the lock.
pub struct LineWriter {
    file: Arc<Mutex<File>>,
    buf: Vec<u8>,
}

impl Write for LineWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let out = file.write_all(&self.buf);
        self.buf.clear();
        out
    }
}

impl Drop for LineWriter {
    fn drop(&mut self) {
        // Losing a log line is better than failing the request that logged it.
        let _ = self.flush();
    }
}

impl<'a> MakeWriter<'a> for LogFile {
    type Writer = LineWriter;

    fn make_writer(&'a self) -> Self::Writer {
        LineWriter {
            file: self.file.clone(),
            buf: Vec::with_capacity(256),
        }
    }
}

/// oslo.log's default lines: `2026-11-27 23:59:01.123 4242 INFO
/// placement.requestlog [None req-… USER PROJECT - - - -] message`
/// inside a request (its global and own request ids, and the user and
/// project of its token, as oslo.log's `logging_context_format_string`
/// and `logging_user_identity_format` place them), `[-]` outside one;
/// levels as Python names them (`WARNING`). A request's line is
/// Placement's request log line: `ADDRESS "METHOD URI" status: S len: N
/// microversion: V`.
pub struct OsloLine;

impl<S, N> FormatEvent<S, N> for OsloLine
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let meta = event.metadata();
        let now = chrono::Utc::now().format("%Y-%m-%d %H:%M:%S%.3f");
        let target = meta.target().replace("::", ".");
        write!(
            writer,
            "{now} {} {} {target} ",
            std::process::id(),
            python_level(*meta.level())
        )?;
        let request = ctx.event_scope().and_then(|scope| {
            scope.from_root().find_map(|span| {
                let ext = span.extensions();
                let fields = ext.get::<tracing_subscriber::fmt::FormattedFields<N>>()?;
                RequestContext::of(fields.as_str())
            })
        });
        match request {
            Some(r) => write!(
                writer,
                "[{} {} {} {} - - - -] ",
                r.global_request_id, r.request_id, r.user, r.project
            )?,
            None => write!(writer, "[-] ")?,
        }
        if meta.target() == REQUEST_LOG_TARGET {
            let mut line = RequestFields::default();
            event.record(&mut line);
            return writeln!(
                writer,
                "{} \"{} {}\" status: {} len: {} microversion: {}",
                line.get("remote"),
                line.get("method"),
                line.get("uri"),
                line.get("status"),
                line.get("len"),
                line.get("microversion"),
            );
        }
        ctx.format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// Python's name of a level (oslo.log writes `WARNING`, not `WARN`).
fn python_level(level: tracing::Level) -> &'static str {
    match level {
        tracing::Level::ERROR => "ERROR",
        tracing::Level::WARN => "WARNING",
        tracing::Level::INFO => "INFO",
        tracing::Level::DEBUG | tracing::Level::TRACE => "DEBUG",
    }
}

/// A request line's fields, as recorded.
#[derive(Default)]
struct RequestFields(Vec<(&'static str, String)>);

impl RequestFields {
    fn get(&self, name: &str) -> &str {
        self.0
            .iter()
            .find(|(n, _)| *n == name)
            .map_or("-", |(_, v)| v.as_str())
    }
}

impl tracing::field::Visit for RequestFields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push((field.name(), format!("{value:?}")));
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.push((field.name(), value.to_string()));
    }
}

/// The request span's ids, user and project, out of its formatted fields.
struct RequestContext {
    global_request_id: String,
    request_id: String,
    user: String,
    project: String,
}

impl RequestContext {
    fn of(fields: &str) -> Option<RequestContext> {
        let field = |name: &str| field_in(fields, name).unwrap_or_else(|| "-".to_string());
        Some(RequestContext {
            request_id: field_in(fields, "request_id")?,
            global_request_id: field_in(fields, "global_request_id")
                .unwrap_or_else(|| "None".to_string()),
            user: field("user_id"),
            project: field("project_id"),
        })
    }
}

/// `name=value` out of a span's formatted fields (values are ids: letters,
/// digits and `-_.@`, as the pipeline records them).
fn field_in(fields: &str, name: &str) -> Option<String> {
    let key = format!("{name}=");
    let start = fields
        .match_indices(&key)
        .find(|(i, _)| *i == 0 || fields.as_bytes()[i - 1] == b' ')
        .map(|(i, _)| i + key.len())?;
    let value: String = fields[start..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || "-_.@".contains(*c))
        .collect();
    (!value.is_empty()).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_is_where_oslo_log_puts_it() {
        let p = |s: &str| PathBuf::from(s);
        assert_eq!(
            file_path(Some(&p("a.log")), Some(&p("/var/log/x"))),
            Some(p("/var/log/x/a.log"))
        );
        assert_eq!(file_path(Some(&p("/l/a.log")), None), Some(p("/l/a.log")));
        assert_eq!(file_path(None, Some(&p("/l"))), Some(p("/l/placement.log")));
        assert_eq!(file_path(None, None), None);
    }

    #[test]
    fn a_planted_link_is_not_followed_and_a_moved_file_is_reopened() {
        let dir = std::env::temp_dir().join(format!("placement-log-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("elsewhere");
        std::fs::write(&target, "").unwrap();
        std::os::unix::fs::symlink(&target, dir.join("link.log")).unwrap();
        assert!(LogFile::open(&dir.join("link.log")).is_err());

        let log = LogFile::open(&dir.join("p.log")).unwrap();
        let mut w = log.make_writer();
        w.write_all(b"one\n").unwrap();
        drop(w);
        std::fs::rename(dir.join("p.log"), dir.join("p.log.1")).unwrap();
        log.reopen().unwrap();
        let mut w = log.make_writer();
        w.write_all(b"two\n").unwrap();
        drop(w);
        assert_eq!(
            std::fs::read_to_string(dir.join("p.log.1")).unwrap(),
            "one\n"
        );
        assert_eq!(std::fs::read_to_string(dir.join("p.log")).unwrap(), "two\n");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn the_request_context_is_found_in_the_span() {
        let r = RequestContext::of(
            "request_id=req-1a2b global_request_id=None method=GET user_id=u-1 project_id=p.2",
        )
        .unwrap();
        assert_eq!(
            (
                r.global_request_id.as_str(),
                r.request_id.as_str(),
                r.user.as_str(),
                r.project.as_str()
            ),
            ("None", "req-1a2b", "u-1", "p.2")
        );
        let r = RequestContext::of("request_id=req-1 global_request_id=req-9").unwrap();
        assert_eq!(
            (r.global_request_id.as_str(), r.user.as_str()),
            ("req-9", "-")
        );
        assert!(RequestContext::of("method=GET").is_none());
        assert_eq!(python_level(tracing::Level::WARN), "WARNING");
    }
}
