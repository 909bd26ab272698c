//! Instructions the kernel's x86 uprobes refuse. Before it installs a breakpoint the kernel decodes
//! the instruction it replaces (arch/x86/kernel/uprobes.c) and rejects, with ENOTSUPP (524), one
//! with a lock prefix or an ES/CS/SS/DS segment-override prefix, and `mov ss`/`pop ss`, which
//! hold off the trap. An uprobe_multi link with such an offset fails as a whole, without saying
//! which, so xtrace checks each offset first and names the function.
use std::os::unix::fs::FileExt;

use iced_x86::{Code, Decoder, DecoderOptions, Instruction, Register};

/// The longest x86 instruction.
pub(crate) const MAX_INSN: usize = 15;

/// Why the kernel would refuse to probe the instruction at `offset` of `file`, with the
/// instruction as text; None when it can be probed. An instruction that does not decode is left
/// for the kernel to judge.
pub fn refused(file: &std::fs::File, offset: u64) -> std::io::Result<Option<String>> {
    let mut bytes = [0u8; MAX_INSN];
    let mut read = 0;
    while read < MAX_INSN {
        match file.read_at(&mut bytes[read..], offset + read as u64)? {
            0 => break,
            n => read += n,
        }
    }
    Ok(refused_bytes(&bytes[..read]))
}

/// [`refused`] on the instruction at the start of `bytes`.
pub fn refused_bytes(bytes: &[u8]) -> Option<String> {
    let mut decoder = Decoder::new(64, bytes, DecoderOptions::NONE);
    let insn = decoder.decode();
    if insn.is_invalid() {
        return None;
    }
    let why = why_refused(&insn)?;
    let code: Vec<String> = bytes[..insn.len()].iter().map(|b| format!("{b:02x}")).collect();
    let mnemonic = format!("{:?}", insn.mnemonic()).to_lowercase();
    Some(format!("its `{mnemonic}` ({}) has {why}", code.join(" ")))
}

/// What in the decoded `insn` the kernel's uprobes refuse, if anything.
pub fn why_refused(insn: &Instruction) -> Option<&'static str> {
    if insn.has_lock_prefix() {
        Some("a lock prefix")
    } else if matches!(
        insn.segment_prefix(),
        Register::ES | Register::CS | Register::SS | Register::DS
    ) {
        Some("a segment-override prefix")
    } else if matches!(
        insn.code(),
        Code::Mov_Sreg_rm16 | Code::Mov_Sreg_r32m16 | Code::Mov_Sreg_r64m16
    ) && insn.op0_register() == Register::SS
        || matches!(insn.code(), Code::Popw_SS | Code::Popd_SS)
    {
        Some("a load of SS, which holds off the breakpoint's trap")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_the_kernel_refuses() {
        // lock decl (%rdi): pthread_spin_lock's first instruction.
        let lock = refused_bytes(&[0xf0, 0xff, 0x0f]).expect("refused");
        assert!(lock.contains("lock prefix"), "{lock}");
        // cs nopw 0x0(%rax,%rax,1)
        let cs = refused_bytes(&[0x2e, 0x66, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0]).expect("refused");
        assert!(cs.contains("segment-override"), "{cs}");
        // mov %eax,%ss
        assert!(refused_bytes(&[0x8e, 0xd0]).is_some());
    }

    #[test]
    fn ordinary_entries_are_probed() {
        for bytes in [
            &[0xf3, 0x0f, 0x1e, 0xfa][..],                  // endbr64
            &[0x55],                                        // push %rbp
            &[0x48, 0x8d, 0x44, 0x7f, 0x01],                // lea 0x1(%rdi,%rdi,2),%rax
            &[0x64, 0x48, 0x8b, 0x04, 0x25, 0x28, 0, 0, 0], // mov %fs:0x28,%rax
            &[0xc3],                                        // ret
            &[0x0f, 0x1f, 0x44, 0, 0],                      // nopl 0x0(%rax,%rax,1)
        ] {
            assert_eq!(refused_bytes(bytes), None, "{bytes:x?}");
        }
    }

    #[test]
    fn undecodable_bytes_are_left_to_the_kernel() {
        assert_eq!(refused_bytes(&[]), None);
        assert_eq!(refused_bytes(&[0x0f]), None);
    }
}
