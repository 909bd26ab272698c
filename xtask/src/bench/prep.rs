//! Everything the bench needs before it measures: the release xtrace and the `uprobe_floor`
//! example, the compiled `hits` workload (with its two sites checked by objdump: `emulated_site`
//! must start with an instruction x86 uprobes emulate, `stepped_site` with one they single-step),
//! bpftrace (installed with apt-get when missing; its absence only blanks its rows), GNU time,
//! and the machine facts printed above the table.
use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{bail, Context, Result};
use serde_json::{Map, Value};

use crate::{
    build::build_xtrace,
    util::{self, is_root, stdout_of, Workspace},
};

pub struct Env {
    pub xtrace: PathBuf,
    pub floor: PathBuf,
    pub hits: PathBuf,
    /// bpftrace, or why it cannot be used.
    pub bpftrace: Result<PathBuf, String>,
    /// `target/bench`: bench.json, compiled fixtures.
    pub dir: PathBuf,
    /// `target/bench/tmp`: per-run outputs, deleted after each run.
    pub tmp: PathBuf,
}

pub fn prepare(ws: &Workspace) -> Result<Env> {
    let xtrace = build_xtrace(ws, true)?;
    let mut example = ws.cargo();
    example.args(["build", "--release", "-p", "xtrace", "--example", "uprobe_floor"]);
    util::run("build of the uprobe_floor example", &mut example)?;
    let floor = ws.target.join("release").join("examples").join("uprobe_floor");

    let dir = ws.target.join("bench");
    let tmp = dir.join("tmp");
    fs::create_dir_all(&tmp).with_context(|| format!("could not create {}", tmp.display()))?;
    let hits = dir.join("hits");
    compile(&fixture("hits.c"), &hits)?;
    check_sites(&hits)?;
    ensure_package("/usr/bin/time", "time")?;
    let bpftrace = bpftrace();
    if let Err(why) = &bpftrace {
        eprintln!("bench: bpftrace rows will be n/a: {why}");
    }
    Ok(Env {
        xtrace,
        floor,
        hits,
        bpftrace,
        dir,
        tmp,
    })
}

/// A C file under xtask/bench/.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("bench").join(name)
}

/// `cc -O2 -g -fno-inline -pthread -o OUT SRC`.
pub fn compile(src: &Path, out: &Path) -> Result<()> {
    compile_with(src, out, &[])
}

/// [`compile`] with `extra` flags after the source (include paths, libraries).
pub fn compile_with(src: &Path, out: &Path, extra: &[String]) -> Result<()> {
    let mut cc = Command::new("cc");
    cc.args(["-O2", "-g", "-fno-inline", "-pthread", "-o"])
        .arg(out)
        .arg(src)
        .args(extra);
    util::run(&format!("compile of {}", src.display()), &mut cc)
}

/// The first instruction's mnemonic of each function in `bin`, per `objdump -d`.
fn first_instructions(bin: &Path) -> Result<Vec<(String, String)>> {
    let out = stdout_of(
        Command::new("objdump")
            .args(["-d", "--no-show-raw-insn"])
            .arg(bin),
    )
    .context("`objdump -d` failed (install binutils)")?;
    let mut firsts = Vec::new();
    let mut current: Option<String> = None;
    for line in out.lines() {
        if let Some(name) = line
            .strip_suffix(">:")
            .and_then(|l| l.split_once(" <"))
            .map(|(_, n)| n)
        {
            current = Some(name.to_owned());
        } else if let Some(name) = current.take() {
            // "    1470:\tnop" → "nop"
            let insn = line
                .split('\t')
                .nth(1)
                .unwrap_or("")
                .split_whitespace()
                .next()
                .unwrap_or("");
            firsts.push((name, insn.to_owned()));
        }
    }
    Ok(firsts)
}

/// Refuses to measure when the sites are not the kinds their names promise.
fn check_sites(hits: &Path) -> Result<()> {
    let firsts = first_instructions(hits)?;
    let first = |sym: &str| -> Result<String> {
        firsts
            .iter()
            .find(|(name, _)| name == sym)
            .map(|(_, insn)| insn.clone())
            .with_context(|| format!("objdump shows no {sym} in {}", hits.display()))
    };
    let emulated = ["nop", "push", "jmp", "call"];
    let (e, s) = (first("emulated_site")?, first("stepped_site")?);
    if !emulated.iter().any(|m| e.starts_with(m)) {
        bail!("emulated_site starts with `{e}`, not nop/push: the compiler changed the fixture");
    }
    if emulated.iter().any(|m| s.starts_with(m)) || s.starts_with("endbr") {
        bail!(
            "stepped_site starts with `{s}`, which is not single-stepped: the compiler changed the fixture"
        );
    }
    let c = first("cet_site")?;
    if !c.starts_with("endbr64") {
        bail!("cet_site starts with `{c}`, not endbr64: the compiler changed the fixture");
    }
    let m = first("moved_site")?;
    if m != s {
        bail!("moved_site starts with `{m}`, not stepped_site's `{s}`: the fixture changed");
    }
    eprintln!(
        "bench: emulated_site starts with `{e}`, stepped_site and moved_site with `{s}`, cet_site \
         with `{c}` (objdump)"
    );
    Ok(())
}

/// apt-get install PACKAGE when `path` is missing.
fn ensure_package(path: &str, package: &str) -> Result<()> {
    if Path::new(path).exists() {
        return Ok(());
    }
    apt_install(package)?;
    if !Path::new(path).exists() {
        bail!("{path} is still missing after apt-get install {package}");
    }
    Ok(())
}

fn apt_install(package: &str) -> Result<()> {
    if !is_root() {
        bail!("{package} is missing and installing it needs root: apt-get install -y {package}");
    }
    let apt = |args: &[&str]| {
        Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    eprintln!("bench: installing {package} (apt-get)");
    let installed =
        apt(&["install", "-y", package]) || (apt(&["update"]) && apt(&["install", "-y", package]));
    if !installed {
        bail!("could not install {package}; try by hand: apt-get update && apt-get install -y {package}");
    }
    Ok(())
}

fn bpftrace_version() -> Option<String> {
    stdout_of(Command::new("bpftrace").arg("--version")).map(|v| v.trim().to_owned())
}

/// bpftrace from PATH as it is, installing nothing (in a guest, whose root is read-only).
pub fn bpftrace_installed() -> Result<PathBuf, String> {
    match bpftrace_version() {
        Some(_) => Ok(PathBuf::from("bpftrace")),
        None => Err("`bpftrace --version` fails: install Debian's bpftrace".into()),
    }
}

/// bpftrace from PATH, installing the Debian package when missing.
fn bpftrace() -> Result<PathBuf, String> {
    if bpftrace_version().is_none() {
        apt_install("bpftrace").map_err(|e| format!("{e:#}"))?;
    }
    match bpftrace_version() {
        Some(_) => Ok(PathBuf::from("bpftrace")),
        None => Err("`bpftrace --version` fails after installing it".into()),
    }
}

/// Kernel, CPU model, cores, bpftrace version and the xtrace commit.
pub fn machine(ws: &Workspace, env: &Env) -> Map<String, Value> {
    let mut facts = machine_facts(env);
    let rev = stdout_of(
        Command::new("git")
            .arg("-C")
            .arg(&ws.root)
            .args(["describe", "--always", "--dirty"]),
    );
    let rev = rev.map_or_else(|| "unknown".into(), |r| r.trim().to_owned());
    facts.insert("xtrace".into(), Value::String(rev));
    facts
}

/// Kernel, CPU model, cores, memory and bpftrace version of the machine this runs on (a guest's,
/// in a guest).
pub fn machine_facts(env: &Env) -> Map<String, Value> {
    let mut facts = Map::new();
    let mut put = |key: &str, value: String| {
        facts.insert(key.to_owned(), Value::String(value));
    };
    let uname = stdout_of(Command::new("uname").args(["-srm"])).unwrap_or_default();
    put("kernel", uname.trim().to_owned());
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo.lines().find_map(|l| {
        l.strip_prefix("model name")?
            .split_once(':')
            .map(|(_, m)| m.trim().to_owned())
    });
    put("cpu", model.unwrap_or_else(|| "unknown".into()));
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    put("cores", cores.to_string());
    let mem = fs::read_to_string("/proc/meminfo").unwrap_or_default();
    put(
        "memory",
        mem.lines()
            .next()
            .unwrap_or("")
            .trim_start_matches("MemTotal:")
            .trim()
            .to_owned(),
    );
    let bpftrace = match &env.bpftrace {
        Ok(_) => bpftrace_version().unwrap_or_default(),
        Err(why) => format!("unavailable ({why})"),
    };
    put("bpftrace", bpftrace);
    facts
}
