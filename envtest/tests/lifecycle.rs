//! Control planes leave nothing behind: not on drop, and not when the test
//! process is killed outright.

use operon_envtest::{ControlPlane, Options};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Whether `pid` runs. A zombie does not: once its parent is gone it waits
/// for init to reap it, which can take seconds.
fn alive(pid: u32) -> bool {
    if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // `pid (comm) state ...`; comm may hold spaces, so look after `)`.
        return stat.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'));
    }
    Command::new("kill").args(["-0", &pid.to_string()]).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

#[test]
fn dropping_a_control_plane_stops_its_processes_and_removes_its_directory() {
    let started = Instant::now();
    let plane = ControlPlane::start(Options::default()).unwrap();
    eprintln!("ready without controller manager in {:.2?}", started.elapsed());
    let pids = plane.pids();
    let dir = plane.dir().to_owned();
    assert_eq!(pids.len(), 2, "etcd and kube-apiserver");
    assert!(pids.iter().all(|&pid| alive(pid)));
    assert!(dir.join("kube-apiserver.log").is_file());

    drop(plane);
    let survivors: Vec<_> = pids.into_iter().filter(|&pid| alive(pid)).collect();
    assert!(survivors.is_empty(), "still running: {survivors:?}");
    assert!(!dir.exists(), "{} was not removed", dir.display());
}

const ABANDON_ENV: &str = "OPERON_ENVTEST_ABANDON";

#[test]
fn processes_die_with_a_killed_test_process() {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "abandon_a_control_plane", "--ignored", "--nocapture"])
        .env(ABANDON_ENV, "1")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pids: Vec<u32> = Vec::new();
    let mut dir = None;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if let Some(list) = line.strip_prefix("pids=") {
            pids = list.split(',').map(|p| p.parse().unwrap()).collect();
        } else if let Some(path) = line.strip_prefix("dir=") {
            dir = Some(PathBuf::from(path));
            break;
        }
    }
    let dir = dir.expect("the child reports its control plane");
    assert_eq!(pids.len(), 5, "etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok");
    assert!(pids.iter().all(|&pid| alive(pid)));

    // SIGKILL: no destructor, no panic handler, nothing runs in the child.
    child.kill().unwrap();
    child.wait().unwrap();

    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let survivors: Vec<_> = pids.iter().copied().filter(|&pid| alive(pid)).collect();
        if survivors.is_empty() && !dir.exists() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "after the test process died: still running {survivors:?}, directory {} exists: {}",
            dir.display(),
            dir.exists()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Starts a control plane with every process (workloads), reports it, and
/// waits to be killed. Only meaningful as the child of
/// `processes_die_with_a_killed_test_process`.
#[test]
#[ignore = "run by processes_die_with_a_killed_test_process"]
fn abandon_a_control_plane() {
    if std::env::var_os(ABANDON_ENV).is_none() {
        return;
    }
    let plane = ControlPlane::start(Options::with_workloads()).unwrap();
    let pids: Vec<String> = plane.pids().iter().map(u32::to_string).collect();
    println!("pids={}", pids.join(","));
    println!("dir={}", plane.dir().display());
    std::thread::sleep(Duration::from_secs(60));
    panic!("expected to be killed by now");
}
