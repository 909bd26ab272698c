use super::*;

fn mapping(start: u64, path: &str) -> Mapping {
    Mapping {
        start,
        end: start + 0x1000,
        offset: 0,
        path: path.into(),
        deleted: false,
        file: None,
    }
}

fn paths(images: &Images, image: u32) -> Vec<&str> {
    images.maps(image).iter().map(|m| m.path.as_str()).collect()
}

#[test]
fn forks_copy_execs_start_empty_and_samples_pick_by_time() {
    let mut images = Images {
        watched: Watched::Pids {
            pids: HashSet::from([10]),
            follow: true,
        },
        ..Images::default()
    };
    let parent = images.at(10, 5);
    images.images.get_mut(&parent).unwrap().read_at = Some(Instant::now()); // as if /proc were read
    images.apply(Change::Map {
        pid: 10,
        ns: 100,
        mapping: mapping(0x400000, "/bin/sh"),
    });
    images.apply(Change::Fork {
        pid: 11,
        parent: 10,
        ns: 200,
    });
    // Mapped by the parent after the fork: not the child's.
    images.apply(Change::Map {
        pid: 10,
        ns: 250,
        mapping: mapping(0x7f00_0000, "/lib/libparent.so"),
    });
    images.apply(Change::Exec { pid: 11, ns: 300 });
    images.apply(Change::Map {
        pid: 11,
        ns: 310,
        mapping: mapping(0x400000, "/bin/ls"),
    });
    // Not sampled: a process neither targeted nor started by one.
    images.apply(Change::Map {
        pid: 99,
        ns: 320,
        mapping: mapping(0x400000, "/bin/other"),
    });
    let forked = images.at(11, 250);
    assert_eq!(paths(&images, forked), ["/bin/sh"]);
    let exec = images.at(11, 400);
    assert_eq!(paths(&images, exec), ["/bin/ls"]);
    assert_eq!(images.replaced(exec), Some(forked));
    assert_eq!(images.replaced(forked), None);
    let parent_now = images.at(10, 400);
    assert_eq!(parent_now, parent);
    assert_eq!(paths(&images, parent), ["/bin/sh", "/lib/libparent.so"]);
    assert!(!images.by_pid.contains_key(&99));
    // A sample before its process's first image began: an image as first seen.
    let early = images.at(11, 100);
    assert!(images.maps(early).is_empty() && early != forked);
    // /proc is read into a process's latest image only.
    images.read_proc(forked);
    assert_eq!(paths(&images, forked), ["/bin/sh"]);

    // The exited child's unused images go; the used one stays.
    images.use_image(exec);
    images.apply(Change::Exit { pid: 11, ns: 500 });
    assert_eq!(images.exited.back().map(|(_, pid)| *pid), Some(11));
    images.forget_unused(11);
    assert_eq!(images.by_pid[&11], [exec]);
    assert!(!images.images.contains_key(&forked) && !images.images.contains_key(&early));
    assert_eq!(paths(&images, exec), ["/bin/ls"]);
}

/// A shell's last sample, taken in the kernel in the exec of `profile` after the kernel set
/// the new name, does not rename the shell's image; an image sampled only in the kernel is
/// named from the first of those samples.
#[test]
fn names_from_user_mode_samples_win_over_names_in_the_kernel() {
    let mut images = Images::default();
    let shell = images.at(10, 5);
    images.named(shell, "sh", true);
    images.named(shell, "profile", true);
    assert_eq!(images.comm(shell), Some("sh"));
    images.named(shell, "sh", false);
    images.named(shell, "profile", true);
    assert_eq!(images.comm(shell), Some("sh"));
    // Renamed by the program itself (prctl), seen in user mode: the last name.
    images.named(shell, "worker", false);
    assert_eq!(images.comm(shell), Some("worker"));
    assert_eq!(images.comm(shell + 1), None);
    // A launched command's image before its exec is the launcher's.
    images.launched(11);
    let launcher = images.at(11, 1);
    assert!(images.is_launcher(launcher) && !images.is_launcher(shell));
}

#[test]
fn without_following_forks_are_not_kept() {
    let mut images = Images {
        watched: Watched::Pids {
            pids: HashSet::from([10]),
            follow: false,
        },
        ..Images::default()
    };
    images.apply(Change::Fork {
        pid: 11,
        parent: 10,
        ns: 200,
    });
    images.apply(Change::Exec { pid: 10, ns: 300 });
    assert!(!images.by_pid.contains_key(&11));
    // The target's own exec is kept: as first seen, then the new program.
    let ids = &images.by_pid[&10];
    assert_eq!(ids.len(), 2);
    assert_eq!(images.replaced(ids[1]), Some(ids[0]));
    assert_eq!(images.images[&ids[1]].start_ns, 300);
}

#[test]
fn records_read_out_of_order_are_applied_in_time_order() {
    let mut images = Images {
        watched: Watched::Pids {
            pids: HashSet::from([10]),
            follow: true,
        },
        ..Images::default()
    };
    // The child's exec and first mapping were read before its fork (another CPU's ring), and
    // the mapping before the exec.
    images.pending = vec![
        Change::Map {
            pid: 11,
            ns: 310,
            mapping: mapping(0x400000, "/bin/ls"),
        },
        Change::Exec { pid: 11, ns: 300 },
        Change::Fork {
            pid: 11,
            parent: 10,
            ns: 200,
        },
        Change::Map {
            pid: 11,
            ns: 900,
            mapping: mapping(0x7f00_0000, "/lib/late.so"),
        },
    ];
    images.apply_up_to(400);
    let ids = images.by_pid[&11].clone();
    assert_eq!(ids.len(), 2, "forked, then exec'd");
    assert_eq!(paths(&images, ids[1]), ["/bin/ls"]);
    assert_eq!(images.replaced(ids[1]), Some(ids[0]));
    // Written after 400: waits.
    assert_eq!(images.pending.len(), 1);
    assert_eq!(images.applied_ns, 400);
}

#[test]
fn a_process_is_alive_until_it_is_gone() {
    assert!(process_alive(std::process::id()));
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    // Exited, not yet reaped: a zombie with no other thread.
    while !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z ")) {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(!process_alive(pid));
    child.wait().unwrap();
    assert!(!process_alive(pid));
}

/// A call is resolved in the image its process had when it was made: a program that exec'd
/// another (or itself, at other addresses) names each call from its own mappings, and images a
/// call was named from are kept.
#[test]
fn calls_are_resolved_in_the_image_of_their_time() {
    // No such process (above the largest pid_max): /proc has nothing to add.
    let pid = 4_194_305;
    let mut images = Images {
        watched: Watched::Pids {
            pids: HashSet::from([pid]),
            follow: false,
        },
        ..Images::default()
    };
    images.apply(Change::Exec { pid, ns: 100 });
    images.apply(Change::Map {
        pid,
        ns: 110,
        mapping: mapping(0x1000, "/first"),
    });
    images.apply(Change::Exec { pid, ns: 200 });
    images.apply(Change::Map {
        pid,
        ns: 210,
        mapping: mapping(0x5000, "/second"),
    });
    let path = |m: Option<&Mapping>| m.map(|m| m.path.clone());
    assert_eq!(path(images.mapping_at(pid, 150, 0x1800)), Some("/first".into()));
    assert_eq!(path(images.mapping_at(pid, 150, 0x5800)), None);
    assert_eq!(path(images.mapping_at(pid, 250, 0x5800)), Some("/second".into()));
    assert_eq!(path(images.mapping_at(pid, 250, 0x1800)), None);
    let (first, second) = (images.at(pid, 150), images.at(pid, 250));
    assert_ne!(first, second);
    assert!(images.images[&first].used && images.images[&second].used);
    // The image the first exec replaced named nothing: it goes once the process has exited.
    assert_eq!(images.by_pid[&pid].len(), 3);
    images.forget_unused(pid);
    assert_eq!(images.by_pid[&pid], vec![first, second]);
}
