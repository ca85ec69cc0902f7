//! The watchdog pings systemd only while the main loop makes progress, on a real datagram
//! NOTIFY_SOCKET. Alone in its binary: it sets NOTIFY_SOCKET for the process.

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use inplaced::systemd::{Heartbeat, Notifier, run_watchdog};

fn pings_during(socket: &UnixDatagram, window: Duration) -> usize {
    let deadline = Instant::now() + window;
    let mut count = 0;
    while Instant::now() < deadline {
        let mut buf = [0u8; 256];
        if let Ok(n) = socket.recv(&mut buf) {
            count += String::from_utf8_lossy(&buf[..n])
                .lines()
                .filter(|l| *l == "WATCHDOG=1")
                .count();
        }
    }
    count
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_pings_stop_while_the_loop_is_stuck_and_resume_after() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    // SAFETY: the only test in this binary, and no other thread reads the environment yet.
    unsafe { std::env::set_var("NOTIFY_SOCKET", &path) };

    let heartbeat = Heartbeat::default();
    let interval = Duration::from_millis(200); // pings every 100 ms while healthy
    let watchdog = tokio::spawn(run_watchdog(Notifier::start(), heartbeat.clone(), interval));
    let beating = |heartbeat: Heartbeat| {
        tokio::spawn(async move {
            loop {
                heartbeat.beat();
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };

    let loop_task = beating(heartbeat.clone());
    let healthy = tokio::task::block_in_place(|| pings_during(&socket, Duration::from_secs(1)));
    assert!(healthy >= 5, "pings while the loop beats: {healthy}");

    loop_task.abort();
    // One ping may already be on its way for the last beat.
    let stuck = tokio::task::block_in_place(|| pings_during(&socket, Duration::from_secs(1)));
    assert!(stuck <= 1, "pings while the loop is stuck: {stuck}");

    let loop_task = beating(heartbeat.clone());
    let recovered = tokio::task::block_in_place(|| pings_during(&socket, Duration::from_secs(1)));
    assert!(recovered >= 5, "pings after the loop recovers: {recovered}");
    loop_task.abort();
    watchdog.abort();
}
