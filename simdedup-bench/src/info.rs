//! What Redis says about itself: `INFO` sections, `INFO commandstats`, and which
//! commands a client sends directly as opposed to from inside a Lua script.
//!
//! Redis counts a command a script runs twice in `INFO commandstats`: in its own
//! row (`cmdstat_hget`) and inside the script's time (`cmdstat_evalsha`). So the
//! Redis time of a check is the scripts' time plus the time of the commands the
//! *client* sent; [`monitor_origins`] tells the two kinds apart by watching
//! `MONITOR` (which labels script commands `[0 lua]`) for a short calibration.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;

/// One `INFO` reply.
#[derive(Debug, Clone, Default)]
pub struct Info(pub String);

impl Info {
    /// `INFO section`.
    pub async fn fetch(
        conn: &mut MultiplexedConnection,
        section: &str,
    ) -> redis::RedisResult<Info> {
        Ok(Info(
            redis::cmd("INFO").arg(section).query_async(conn).await?,
        ))
    }

    /// `INFO section` of the primary that serves namespace `ns` (on a
    /// cluster, the one node its keys live on).
    pub async fn fetch_for(
        conn: &mut simdedup::connect::Conn,
        ns: &str,
        section: &str,
    ) -> redis::RedisResult<Info> {
        let key = simdedup::keys::Keys::new(ns).input_stream();
        let mut cmd = redis::cmd("INFO");
        cmd.arg(section);
        Ok(Info(conn.query_on_primary_of(&key, cmd).await?))
    }

    /// The raw value of `name:value`.
    pub fn text(&self, name: &str) -> Option<&str> {
        self.0.lines().find_map(|l| {
            l.strip_prefix(name)
                .and_then(|r| r.strip_prefix(':'))
                .map(str::trim)
        })
    }

    /// A numeric field, 0 when absent.
    pub fn num(&self, name: &str) -> f64 {
        self.text(name).and_then(|v| v.parse().ok()).unwrap_or(0.0)
    }

    /// `used_cpu_user + used_cpu_sys`, seconds of CPU the server used so far.
    pub fn cpu_seconds(&self) -> f64 {
        self.num("used_cpu_user") + self.num("used_cpu_sys")
    }

    /// Keys of database 0 (`INFO keyspace`).
    pub fn keys(&self) -> u64 {
        self.text("db0")
            .and_then(|v| v.split(',').find_map(|kv| kv.strip_prefix("keys=")))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }

    /// The rows of `INFO commandstats`, by lowercase command name.
    pub fn command_stats(&self) -> BTreeMap<String, CommandStat> {
        self.0
            .lines()
            .filter_map(|l| l.strip_prefix("cmdstat_"))
            .filter_map(|l| {
                let (name, rest) = l.split_once(':')?;
                let get = |k: &str| {
                    rest.split(',')
                        .find_map(|kv| kv.strip_prefix(k)?.strip_prefix('='))
                        .and_then(|v| v.trim().parse::<f64>().ok())
                        .unwrap_or(0.0)
                };
                Some((
                    name.to_ascii_lowercase(),
                    CommandStat {
                        calls: get("calls"),
                        usec: get("usec"),
                    },
                ))
            })
            .collect()
    }
}

/// One `cmdstat_*` row.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CommandStat {
    pub calls: f64,
    pub usec: f64,
}

impl CommandStat {
    pub fn usec_per_call(&self) -> f64 {
        if self.calls > 0.0 {
            self.usec / self.calls
        } else {
            0.0
        }
    }
}

/// Commands of the bench itself, left out of the per-check figures.
pub fn is_bench_command(name: &str) -> bool {
    matches!(
        name,
        "info" | "config|resetstat" | "config|get" | "config|set" | "config" | "monitor" | "ping"
    ) || name.starts_with("client")
        || name.starts_with("hello")
}

/// Script calls (`EVALSHA`, `EVAL`, and `FCALL` should the index move to functions).
pub fn is_script_command(name: &str) -> bool {
    matches!(
        name,
        "evalsha" | "eval" | "evalsha_ro" | "eval_ro" | "fcall" | "fcall_ro"
    )
}

/// Calls seen by `MONITOR`, by lowercase command name: (sent by a client, run by a script).
pub type Origins = BTreeMap<String, (u64, u64)>;

/// Watch `MONITOR` on `host:port` while `work` runs; count each command by
/// origin. Costs Redis time while it runs: use it only for a calibration,
/// never during measured work.
pub async fn monitor_origins<F: std::future::Future>(
    host_port: &str,
    work: F,
) -> std::io::Result<(Origins, F::Output)> {
    let mut stream = TcpStream::connect(host_port)?;
    stream.set_read_timeout(Some(Duration::from_millis(200)))?;
    stream.write_all(b"MONITOR\r\n")?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut ok = String::new();
    reader.read_line(&mut ok)?;
    if !ok.starts_with("+OK") {
        return Err(std::io::Error::other(format!(
            "MONITOR refused: {}",
            ok.trim()
        )));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut origins = Origins::new();
            let mut line = String::new();
            loop {
                line.clear();
                match reader.read_line(&mut line) {
                    Ok(0) => break,
                    Ok(_) => {
                        if let Some((name, lua)) = parse_monitor_line(&line) {
                            let e = origins.entry(name).or_default();
                            if lua {
                                e.1 += 1;
                            } else {
                                e.0 += 1;
                            }
                        }
                    }
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) =>
                    {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                    }
                    Err(_) => break,
                }
            }
            origins
        })
    };
    let out = work.await;
    // Let the last lines arrive, then stop reading.
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let _ = stream.shutdown(std::net::Shutdown::Both);
    let origins = watcher
        .join()
        .map_err(|_| std::io::Error::other("MONITOR reader panicked"))?;
    Ok((origins, out))
}

/// `+1700000000.123456 [0 127.0.0.1:5555] "SMEMBERS" "k"` → ("smembers", false);
/// `… [0 lua] "HGET" …` → ("hget", true).
fn parse_monitor_line(line: &str) -> Option<(String, bool)> {
    let line = line.strip_prefix('+')?;
    let open = line.find('[')?;
    let close = open + line[open..].find(']')?;
    let lua = line[open..close].ends_with(" lua");
    let rest = line[close + 1..].trim_start().strip_prefix('"')?;
    let name = &rest[..rest.find('"')?];
    Some((name.to_ascii_lowercase(), lua))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_info_fields_and_commandstats() {
        let info = Info(
            "# CPU\r\nused_cpu_sys:1.5\r\nused_cpu_user:2.25\r\n# Commandstats\r\n\
             cmdstat_evalsha:calls=10,usec=500,usec_per_call=50.00,rejected_calls=0,failed_calls=0\r\n\
             cmdstat_config|resetstat:calls=1,usec=3,usec_per_call=3.00\r\n\
             db0:keys=42,expires=40,avg_ttl=0\r\n"
                .into(),
        );
        assert_eq!(info.cpu_seconds(), 3.75);
        assert_eq!(info.keys(), 42);
        let stats = info.command_stats();
        assert_eq!(stats["evalsha"].calls, 10.0);
        assert_eq!(stats["evalsha"].usec_per_call(), 50.0);
        assert!(is_bench_command("config|resetstat"));
        assert!(is_script_command("evalsha"));
        assert_eq!(info.num("missing"), 0.0);
    }

    #[test]
    fn parses_monitor_lines() {
        assert_eq!(
            parse_monitor_line("+1700000000.123456 [0 127.0.0.1:5555] \"SMEMBERS\" \"k\"\r\n"),
            Some(("smembers".into(), false))
        );
        assert_eq!(
            parse_monitor_line("+1700000000.123456 [0 lua] \"HGET\" \"k\" \"f\"\r\n"),
            Some(("hget".into(), true))
        );
        assert_eq!(parse_monitor_line("-ERR x"), None);
    }
}
