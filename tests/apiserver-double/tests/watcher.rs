//! kube-rs `watcher` and raw watches against the double: initial list, resume after a
//! dropped connection, 410 relist after compaction, bookmarks.

mod common;

use std::time::Duration;

use apiserver_double::ServerConfig;
use common::*;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PostParams, WatchEvent, WatchParams};
use kube::runtime::watcher::{self, Event};
use serde_json::json;
use tokio::time::timeout;

type Events =
    std::pin::Pin<Box<dyn futures::Stream<Item = Result<Event<Pod>, watcher::Error>> + Send>>;

/// Next watcher event, skipping errors (the raw watcher retries on the next poll).
async fn next(stream: &mut Events) -> Event<Pod> {
    loop {
        match timeout(Duration::from_secs(10), stream.next()).await {
            Ok(Some(Ok(ev))) => return ev,
            Ok(Some(Err(_))) => continue,
            Ok(None) => panic!("watch stream ended"),
            Err(_) => panic!("no watcher event in time"),
        }
    }
}

fn name(p: &Pod) -> String {
    p.metadata.name.clone().unwrap_or_default()
}

async fn expect_init(stream: &mut Events) -> Vec<String> {
    assert!(matches!(next(stream).await, Event::Init));
    let mut names = vec![];
    loop {
        match next(stream).await {
            Event::InitApply(p) => names.push(name(&p)),
            Event::InitDone => return names,
            other => panic!("unexpected {other:?}"),
        }
    }
}

fn watch_rvs(server: &apiserver_double::ApiServer) -> Vec<String> {
    server
        .audit()
        .resource_entries()
        .into_iter()
        .filter(|e| e.request.verb == "watch")
        .map(|e| {
            e.query
                .split('&')
                .find_map(|kv| kv.strip_prefix("resourceVersion=").map(str::to_owned))
                .unwrap_or_default()
        })
        .collect()
}

#[tokio::test]
async fn watcher_lists_then_follows_changes_on_its_node() {
    let server = server().await;
    server.store().create("pods", pod("a", "node-1")).unwrap();
    server.store().create("pods", pod("b", "node-2")).unwrap();
    let client = client(&server).await;
    let pods: Api<Pod> = Api::all(client.clone());
    let mut stream: Events = watcher::watcher(
        pods,
        watcher::Config::default().fields("spec.nodeName=node-1"),
    )
    .boxed();
    assert_eq!(expect_init(&mut stream).await, vec!["a"]);

    let api: Api<Pod> = Api::namespaced(client, "default");
    api.create(&PostParams::default(), &typed(pod("c", "node-1")))
        .await
        .unwrap();
    api.create(&PostParams::default(), &typed(pod("d", "node-2")))
        .await
        .unwrap();
    match next(&mut stream).await {
        Event::Apply(p) => assert_eq!(name(&p), "c"),
        other => panic!("unexpected {other:?}"),
    }
    api.delete("c", &Default::default()).await.unwrap();
    match next(&mut stream).await {
        Event::Delete(p) => assert_eq!(name(&p), "c"),
        other => panic!("unexpected {other:?}"),
    }
    // The list used resourceVersion=0 semantics or a consistent read, then a watch with bookmarks.
    let watch = server
        .audit()
        .resource_entries()
        .into_iter()
        .find(|e| e.request.verb == "watch")
        .unwrap();
    assert!(
        watch.query.contains("allowWatchBookmarks=true"),
        "{}",
        watch.query
    );
    assert!(
        watch.query.contains("fieldSelector=spec.nodeName%3Dnode-1"),
        "{}",
        watch.query
    );
}

#[tokio::test]
async fn watcher_resumes_from_last_resource_version_after_drop() {
    let server = server().await;
    server.store().create("pods", pod("a", "n")).unwrap();
    let client = client(&server).await;
    let mut stream: Events =
        watcher::watcher(Api::<Pod>::all(client), watcher::Config::default()).boxed();
    expect_init(&mut stream).await;
    let created = server.store().create("pods", pod("b", "n")).unwrap();
    assert!(matches!(next(&mut stream).await, Event::Apply(_)));

    server.faults().drop_watches();
    // Changes made while no watch is open must still arrive, without a relist.
    server.store().create("pods", pod("c", "n")).unwrap();
    match next(&mut stream).await {
        Event::Apply(p) => assert_eq!(name(&p), "c"),
        other => panic!("expected resume, got {other:?}"),
    }
    let rvs = watch_rvs(&server);
    assert_eq!(rvs.len(), 2, "{rvs:?}");
    assert_eq!(
        rvs[1],
        created["metadata"]["resourceVersion"].as_str().unwrap()
    );
    let lists = server
        .audit()
        .resource_entries()
        .iter()
        .filter(|e| e.request.verb == "list")
        .count();
    assert_eq!(lists, 1);
}

#[tokio::test]
async fn watcher_relists_on_410_after_compaction() {
    let server = server_with(ServerConfig {
        history_limit: 3,
        ..Default::default()
    })
    .await;
    server.store().create("pods", pod("a", "n")).unwrap();
    let client = client(&server).await;
    let mut stream: Events = watcher::watcher(
        Api::<Pod>::all(client),
        watcher::Config::default().disable_bookmarks(),
    )
    .boxed();
    expect_init(&mut stream).await;

    // The watcher opens its watch lazily, on the next poll: by then the history window
    // (3 changes) has moved past the list's resourceVersion.
    for i in 0..5 {
        server
            .store()
            .create("pods", pod(&format!("p{i}"), "n"))
            .unwrap();
    }
    // Drain until the relist: the 410 ERROR event surfaces as an error, skipped by `next`.
    loop {
        match next(&mut stream).await {
            Event::Init => break,
            Event::Apply(_) | Event::Delete(_) => panic!("events were compacted away"),
            _ => {}
        }
    }
    let mut names = vec![];
    loop {
        match next(&mut stream).await {
            Event::InitApply(p) => names.push(name(&p)),
            Event::InitDone => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(names, vec!["a", "p0", "p1", "p2", "p3", "p4"]);
    let lists = server
        .audit()
        .resource_entries()
        .iter()
        .filter(|e| e.request.verb == "list")
        .count();
    assert_eq!(lists, 2);
}

#[tokio::test]
async fn bookmarks_arrive_and_watcher_resumes_from_them() {
    let server = server_with(ServerConfig {
        bookmark_interval: Duration::from_millis(100),
        ..Default::default()
    })
    .await;
    server.store().create("pods", pod("a", "n")).unwrap();
    let client = client(&server).await;

    // Raw watch: a BOOKMARK carries the current resourceVersion, even one moved by other resources.
    let api: Api<Pod> = Api::all(client.clone());
    let rv = server.store().resource_version().to_string();
    server
        .store()
        .create("nodes", json!({"metadata": {"name": "n"}}))
        .unwrap();
    let now = server.store().resource_version().to_string();
    let mut s = api
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    match timeout(Duration::from_secs(5), s.try_next())
        .await
        .unwrap()
        .unwrap()
    {
        Some(WatchEvent::Bookmark(b)) => assert_eq!(b.metadata.resource_version, now),
        other => panic!("expected bookmark, got {other:?}"),
    }
    drop(s);

    // The watcher keeps the bookmark's version and resumes from it after a drop.
    let mut stream: Events = watcher::watcher(api, watcher::Config::default()).boxed();
    expect_init(&mut stream).await;
    // The watcher is lazy: an event proves its watch is open.
    server.store().create("pods", pod("y", "n")).unwrap();
    assert!(matches!(next(&mut stream).await, Event::Apply(_)));
    server
        .store()
        .create("nodes", json!({"metadata": {"name": "m"}}))
        .unwrap();
    let target = server.store().resource_version().to_string();
    // Poll (bookmarks yield no event) long enough for a few bookmarks to be read.
    assert!(
        timeout(Duration::from_millis(400), stream.next())
            .await
            .is_err()
    );
    server.faults().drop_watches();
    server.store().create("pods", pod("z", "n")).unwrap();
    assert!(matches!(next(&mut stream).await, Event::Apply(_)));
    let rvs = watch_rvs(&server);
    assert_eq!(
        rvs.last().unwrap(),
        &target,
        "{rvs:?} {:#?}",
        server.audit().entries()
    );
}

#[tokio::test]
async fn streaming_list_sends_initial_events_then_end_bookmark() {
    let server = server().await;
    server.store().create("pods", pod("a", "n")).unwrap();
    server.store().create("pods", pod("b", "n")).unwrap();
    let client = client(&server).await;
    let mut stream: Events = watcher::watcher(
        Api::<Pod>::all(client),
        watcher::Config::default().streaming_lists(),
    )
    .boxed();
    assert_eq!(expect_init(&mut stream).await, vec!["a", "b"]);
    server.store().create("pods", pod("c", "n")).unwrap();
    assert!(matches!(next(&mut stream).await, Event::Apply(_)));
    let lists = server
        .audit()
        .resource_entries()
        .iter()
        .filter(|e| e.request.verb == "list")
        .count();
    assert_eq!(lists, 0);
}

#[tokio::test]
async fn label_selected_watch_sees_objects_enter_and_leave() {
    let server = server().await;
    let client = client(&server).await;
    let nodes: Api<Node> = Api::all(client);
    let rv = server.store().resource_version().to_string();
    let mut s = nodes
        .watch(&WatchParams::default().labels("role=agent"), &rv)
        .await
        .unwrap()
        .boxed();
    server
        .store()
        .create("nodes", json!({"metadata": {"name": "n1"}}))
        .unwrap();
    server
        .store()
        .merge_patch(
            "nodes",
            "",
            "n1",
            json!({"metadata": {"labels": {"role": "agent"}}}),
        )
        .unwrap();
    server
        .store()
        .merge_patch(
            "nodes",
            "",
            "n1",
            json!({"metadata": {"labels": {"role": null}}}),
        )
        .unwrap();
    let mut kinds = vec![];
    for _ in 0..2 {
        match timeout(Duration::from_secs(5), s.try_next())
            .await
            .unwrap()
            .unwrap()
        {
            Some(WatchEvent::Added(_)) => kinds.push("ADDED"),
            Some(WatchEvent::Deleted(gone)) => {
                // As the cacher: the object as it last matched, at the version that removed it.
                assert_eq!(
                    gone.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get("role"))
                        .map(String::as_str),
                    Some("agent")
                );
                let now = server.store().get("nodes", "", "n1").unwrap();
                assert_eq!(
                    gone.metadata.resource_version.as_deref(),
                    now["metadata"]["resourceVersion"].as_str()
                );
                kinds.push("DELETED");
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(kinds, vec!["ADDED", "DELETED"]);
}
