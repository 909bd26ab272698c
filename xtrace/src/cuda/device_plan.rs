//! Planning the GPU device timeline (`--cuda`): the tool library's `xtrace:gpu_records` probe,
//! where the kernel program `gpu_records` copies the device records the library hands over.
//! Attaching it raises the probe's semaphore, which is what switches the library's CUPTI session
//! on (`xtrace/tool/src/device.rs`). The library's `xtrace:gpu_drain` site is planned beside it and
//! attached only when the recording stops (`session::drain`): raising that semaphore switches the
//! session off while `gpu_records` is still attached, so the last records still arrive, ending
//! with a `DRAINED` record. Detaching lowers both.
//!
//! A launched command loads the shipped library through `CUDA_INJECTION64_PATH` (set by
//! [`launch_env`]); a `--pid` process has it mapped when it was started with the variable, else
//! one notice says how to start it (or `--inject` loaded it: `crate::inject`).
use std::{
    ffi::OsString,
    path::{Path, PathBuf},
};

use crate::{
    error::Result,
    probes::{
        ranges::{is_tool, shipped, TOOL_LIBRARY},
        spec::TargetSpec,
        uprobe::{Plan, Scope},
        usdt::{
            self,
            spec::{RangeOp, UsdtArgType, UsdtSpec},
        },
    },
};

/// The variable the CUDA driver reads at `cuInit` for its injection library.
pub const INJECTION_ENV: &str = "CUDA_INJECTION64_PATH";

/// Adds the `gpu_records` and `gpu_drain` probes of each tool library in `scopes` to `plan`.
/// `explicit`: `--cuda` was given; else (CUDA tracing on by itself with `--pid`) only when the
/// CUDA plan found CUDA libraries (`cuda_found`), since the tool library may be mapped for NVTX
/// or ITT alone. Returns whether a probe was added. A library without `gpu_drain` (an older
/// build) is traced without it, with a notice.
pub fn plan(plan: &mut Plan, scopes: &[Scope], explicit: bool, cuda_found: usize) -> Result<bool> {
    if !explicit && cuda_found == 0 {
        return Ok(false);
    }
    let files = tool_files(plan, scopes)?;
    if files.is_empty() {
        return Ok(false);
    }
    let records: Vec<UsdtSpec> = files
        .iter()
        .map(|file| spec(file, "gpu_records", RangeOp::GpuRecords))
        .collect();
    usdt::plan::plan(plan, &records, scopes)?;
    for file in &files {
        if usdt::plan::plan(plan, &[spec(file, "gpu_drain", RangeOp::GpuDrain)], scopes).is_err() {
            plan.notices.push(format!(
                "--cuda: {} has no xtrace:gpu_drain probe (a build older than this xtrace): the last \
                 100 ms of its processes' GPU device timeline may be missing; start them with this \
                 xtrace's {TOOL_LIBRARY}",
                file.display()
            ));
        }
    }
    Ok(true)
}

/// The tool libraries of `scopes`: the one each process mapped, the shipped one for a launched
/// command. A process that did not map one gets a notice saying how to start it.
fn tool_files(plan: &mut Plan, scopes: &[Scope]) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = Vec::new();
    for scope in scopes {
        let found: Vec<PathBuf> = match scope {
            Scope::Process(p) => {
                let tools: Vec<PathBuf> = p
                    .mapped_files()?
                    .into_iter()
                    .filter(|f| is_tool(&f.shown))
                    .map(|f| f.shown)
                    .collect();
                if tools.is_empty() {
                    plan.notices.push(format!(
                        "--cuda: pid {} was not started with {INJECTION_ENV} set to {TOOL_LIBRARY}: its CUDA \
                         calls are traced, not its GPU device timeline; start it with \
                         {INJECTION_ENV}=/path/to/{TOOL_LIBRARY} (see docs/guide.md, GPU device timeline), \
                         launch it with `xtrace --cuda -- COMMAND`, or add --inject to load the library \
                         into it now",
                        p.pid
                    ));
                }
                tools
            }
            Scope::Command(_) => shipped().into_iter().collect(),
            Scope::SystemWide => Vec::new(),
        };
        for file in found {
            if !files.contains(&file) {
                files.push(file);
            }
        }
    }
    Ok(files)
}

/// The spec of the tool library `file`'s probe `name` (`xtrace_common::ranges::PROBES`).
fn spec(file: &Path, name: &str, op: RangeOp) -> UsdtSpec {
    UsdtSpec {
        text: format!("{}:xtrace:{name}", file.display()),
        target: Some(TargetSpec::Path(file.to_path_buf())),
        provider: "xtrace".into(),
        name: name.into(),
        types: vec![UsdtArgType::Note, UsdtArgType::Note],
        range: Some(op),
        pair: None,
    }
}

/// The variable a launched command gets for the device timeline: the shipped tool library,
/// unless the user set the variable to another (then a notice says so) or there is none.
pub fn launch_env(notices: &mut Vec<String>) -> Option<(&'static str, OsString)> {
    let tool = shipped()?;
    match std::env::var_os(INJECTION_ENV) {
        Some(set) if set != tool.as_os_str() => {
            notices.push(format!(
                "{INJECTION_ENV} is already set to {}: CUDA loads that library, not xtrace's, so there \
                 is no GPU device timeline; unset it to record one",
                set.to_string_lossy()
            ));
            None
        }
        _ => Some((INJECTION_ENV, tool.into_os_string())),
    }
}
