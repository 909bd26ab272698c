//! The CUDA family's planning: whether CUDA calls are traced (`--cuda`, or by themselves with
//! `--pid`), and the order of its steps: the `dlopen` watch for libraries loaded later, the span
//! probes of the libraries found (`plan`), the device timeline's probe (`device_plan`).
use crate::{
    error::Result,
    probes::{
        planner::{Planner, Planning},
        uprobe::Plan,
    },
};

/// Whether CUDA calls are traced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CudaMode {
    Off,
    /// `--cuda`: a target without a CUDA library is an error.
    On,
    /// No probe flags with `--pid`: traced when the process maps a CUDA library.
    Auto,
}

impl Planner for CudaMode {
    fn plan(&self, plan: &mut Plan, at: &mut Planning<'_>) -> Result<()> {
        if *self == CudaMode::Off {
            return Ok(());
        }
        let on = *self == CudaMode::On;
        // With --cuda, libraries loaded later are watched for (not system-wide: every process
        // that maps a library planned now is traced anyway).
        let watching = on && !at.system_wide() && super::late::plan_watch(plan, at.scopes, at.elves)?;
        let found = super::plan::plan(plan, (at.scopes, at.elves), on && !watching)?;
        super::device_plan::plan(plan, at.scopes, on, found)?;
        if watching && found == 0 {
            plan.notices.push(
                "--cuda: no CUDA library is loaded yet; xtrace attaches to libcudart/libcuda \
                 when the program loads them (dlopen)"
                    .into(),
            );
        }
        Ok(())
    }
}
