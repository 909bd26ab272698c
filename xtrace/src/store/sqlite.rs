//! The SQLite store: one file, each push in one transaction. Made by xtrace under sudo, the file
//! and its directory belong to the user who ran sudo.
use std::path::Path;

use rusqlite::{params_from_iter, Connection, OptionalExtension};

use super::{
    schema::{self, Table, Value},
    Backend, Error, Function, Result, Run, StoredFunction, StoredRun,
};

pub struct Sqlite {
    db: Connection,
    url: String,
}

impl Sqlite {
    /// Opens the file at `path`, making it (and its directory) if missing.
    pub fn open(path: &Path, url: &str) -> Result<Sqlite> {
        let unreachable = |reason: String| Error::Unreachable {
            url: url.to_string(),
            reason,
        };
        let made = !path.exists();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
            std::fs::create_dir_all(dir).map_err(|e| unreachable(format!("{}: {e}", dir.display())))?;
            give_to_sudo_user(dir);
        }
        let db = Connection::open(path).map_err(|e| unreachable(e.to_string()))?;
        if made {
            give_to_sudo_user(path);
        }
        Ok(Sqlite {
            db,
            url: url.to_string(),
        })
    }

    fn refused(&self, e: rusqlite::Error) -> Error {
        Error::Refused {
            url: self.url.clone(),
            reason: e.to_string(),
        }
    }

    fn insert_rows(&self, table: &Table, rows: impl Iterator<Item = Vec<Value>>) -> rusqlite::Result<()> {
        let marks = vec!["?"; table.columns.len()].join(", ");
        let names: Vec<&str> = table.columns.iter().map(|(n, _)| *n).collect();
        let sql = format!(
            "INSERT INTO {} ({}) VALUES ({marks})",
            table.name,
            names.join(", ")
        );
        let mut statement = self.db.prepare_cached(&sql)?;
        for row in rows {
            statement.execute(params_from_iter(row))?;
        }
        Ok(())
    }
}

impl rusqlite::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        match self {
            Value::Text(t) => t.to_sql(),
            // Counts and nanoseconds, far below 2^63; saturate rather than wrap.
            Value::Int(n) => Ok(i64::try_from(*n).unwrap_or(i64::MAX).into()),
        }
    }
}

/// Under sudo, hands `path` to the user who ran it, so that their own xtrace can use it later.
fn give_to_sudo_user(path: &Path) {
    let id = |var: &str| std::env::var(var).ok().and_then(|v| v.parse::<u32>().ok());
    if let (Some(uid), Some(gid)) = (id("SUDO_UID"), id("SUDO_GID")) {
        // Best effort: a store that stays root's still works under sudo.
        let _ = std::os::unix::fs::chown(path, Some(uid), Some(gid));
    }
}

impl Sqlite {
    /// Records that the store is of this xtrace's schema version.
    fn record_version(&self) -> Result<()> {
        self.db
            .execute(
                "INSERT INTO schema_versions (version) VALUES (?1)",
                [schema::VERSION],
            )
            .map(|_| ())
            .map_err(|e| self.refused(e))
    }
}

impl Backend for Sqlite {
    fn prepare(&mut self) -> Result<()> {
        // The version first: a store of a newer schema is refused before anything is written.
        self.db
            .execute_batch(&schema::sqlite_ddl(&schema::VERSIONS))
            .map_err(|e| self.refused(e))?;
        let found: Option<i64> = self
            .db
            .query_row("SELECT max(version) FROM schema_versions", [], |r| r.get(0))
            .optional()
            .map_err(|e| self.refused(e))?
            .flatten();
        let found = found.map(|v| u32::try_from(v).unwrap_or(u32::MAX));
        // A new store's tables are made as this version's; an older store's migrated.
        let migrations: Vec<_> = match found {
            Some(found) => super::migrations(&self.url, found)?.collect(),
            None => Vec::new(),
        };
        // One transaction: a migration cut short leaves the store as it was.
        let tx = self.db.unchecked_transaction().map_err(|e| self.refused(e))?;
        for migration in &migrations {
            let exists = self
                .db
                .query_row(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1",
                    [migration.table],
                    |_| Ok(()),
                )
                .optional()
                .map_err(|e| self.refused(e))?
                .is_some();
            for statement in migration.sqlite.iter().filter(|_| exists) {
                self.db.execute_batch(statement).map_err(|e| self.refused(e))?;
            }
        }
        for table in schema::TABLES {
            self.db
                .execute_batch(&schema::sqlite_ddl(table))
                .map_err(|e| self.refused(e))?;
        }
        if found.is_none() || !migrations.is_empty() {
            self.record_version()?;
        }
        tx.commit().map_err(|e| self.refused(e))
    }

    fn has_run(&mut self, id: &str) -> Result<bool> {
        self.db
            .query_row("SELECT 1 FROM runs WHERE run_id = ?1 LIMIT 1", [id], |_| Ok(()))
            .optional()
            .map(|found| found.is_some())
            .map_err(|e| self.refused(e))
    }

    fn write(&mut self, tables: Vec<(&'static Table, Vec<Vec<Value>>)>) -> Result<()> {
        let tx = self.db.unchecked_transaction().map_err(|e| self.refused(e))?;
        for (table, table_rows) in tables {
            self.insert_rows(table, table_rows.into_iter())
                .map_err(|e| self.refused(e))?;
        }
        tx.commit().map_err(|e| self.refused(e))
    }

    fn runs(&mut self) -> Result<Vec<StoredRun>> {
        let sql =
            "SELECT run_id, attempt, host, started_ns, duration_ns, command, stop_reason, labels FROM runs";
        let mut statement = self.db.prepare(sql).map_err(|e| self.refused(e))?;
        let rows = statement
            .query_map([], |r| {
                let labels: String = r.get(7)?;
                Ok(StoredRun {
                    attempt: r.get(1)?,
                    run: Run {
                        id: r.get(0)?,
                        host: r.get(2)?,
                        started_ns: r.get::<_, i64>(3)? as u64,
                        duration_ns: r.get::<_, i64>(4)? as u64,
                        command: r.get(5)?,
                        stop_reason: r.get(6)?,
                        labels: serde_json::from_str(&labels).unwrap_or_default(),
                    },
                })
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>());
        rows.map_err(|e| self.refused(e))
    }

    fn functions(&mut self, attempts: &[String], names: &[String]) -> Result<Vec<StoredFunction>> {
        let mut out = Vec::new();
        // One query per attempt keeps the statements small and cached, whatever the number of runs.
        let named = if names.is_empty() {
            String::new()
        } else {
            format!(" AND name IN ({})", vec!["?"; names.len()].join(", "))
        };
        let functions_sql = format!(
            "SELECT name, kind, count, total_ns, min_ns, max_ns FROM functions WHERE attempt = ?{named} ORDER BY name, kind"
        );
        let buckets_sql = format!(
            "SELECT name, kind, floor_ns, calls FROM histograms WHERE attempt = ?{named} ORDER BY name, kind, floor_ns"
        );
        for attempt in attempts {
            let args: Vec<&String> = std::iter::once(attempt).chain(names).collect();
            let mut functions = self.query_functions(&functions_sql, &args)?;
            for (name, kind, bucket) in self.query_buckets(&buckets_sql, &args)? {
                if let Some(f) = functions.iter_mut().find(|f| f.name == name && f.kind == kind) {
                    f.histogram.push(bucket);
                }
            }
            out.extend(functions.into_iter().map(|function| StoredFunction {
                attempt: attempt.clone(),
                function,
            }));
        }
        Ok(out)
    }
}

impl Sqlite {
    fn query_functions(&self, sql: &str, args: &[&String]) -> Result<Vec<Function>> {
        let mut statement = self.db.prepare_cached(sql).map_err(|e| self.refused(e))?;
        let rows = statement
            .query_map(params_from_iter(args), |r| {
                let n = |i| r.get::<_, i64>(i).map(|v| v as u64);
                Ok(Function {
                    name: r.get(0)?,
                    kind: r.get(1)?,
                    count: n(2)?,
                    total_ns: n(3)?,
                    min_ns: n(4)?,
                    max_ns: n(5)?,
                    histogram: Vec::new(),
                })
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>());
        rows.map_err(|e| self.refused(e))
    }

    fn query_buckets(&self, sql: &str, args: &[&String]) -> Result<Vec<(String, String, [u64; 2])>> {
        let mut statement = self.db.prepare_cached(sql).map_err(|e| self.refused(e))?;
        let rows = statement
            .query_map(params_from_iter(args), |r| {
                let n = |i| r.get::<_, i64>(i).map(|v| v as u64);
                Ok((r.get(0)?, r.get(1)?, [n(2)?, n(3)?]))
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>());
        rows.map_err(|e| self.refused(e))
    }
}
