//! Tests of the change signal every cache waiter relies on (R26 readiness, read-your-writes).

use std::time::Duration;

use kube::runtime::watcher;

use super::*;

const PATIENCE: Duration = Duration::from_secs(10);

/// Eight waiters for the first list at once are all let through when it arrives (kube's own
/// `Store::wait_until_ready` wakes only the last of several).
#[tokio::test]
async fn every_waiter_sees_the_first_list() {
    let (caches, mut writers) = for_tests();
    let waiters: Vec<_> = (0..8)
        .map(|_| {
            let caches = caches.clone();
            tokio::spawn(async move { caches.listed(Cache::Owners(OwnerKind::Mutation)).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!caches.ready());
    writers.sync();
    assert!(caches.ready());
    for waiter in waiters {
        let woke = tokio::time::timeout(PATIENCE, waiter).await;
        assert!(matches!(woke, Ok(Ok(true))), "{woke:?}");
    }
}

/// A waiter is woken by the change it waits for, and gives up at its deadline otherwise.
#[tokio::test]
async fn until_wakes_on_a_change_and_gives_up_at_its_deadline() {
    let (caches, mut writers) = for_tests();
    let deadline = Instant::now() + Duration::from_millis(100);
    let nothing = caches
        .until(Some(deadline), |c, _| c.mutations.state().first().cloned())
        .await;
    assert!(nothing.is_none());
    assert!(Instant::now() >= deadline);

    let waiter = {
        let caches = caches.clone();
        tokio::spawn(async move {
            caches
                .until(Some(Instant::now() + PATIENCE), |c, state| {
                    c.mutations
                        .state()
                        .first()
                        .map(|m| (m.metadata.name.clone(), state.version))
                })
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut m = Mutation::new(
        "web",
        serde_json::from_value(serde_json::json!({
            "deployment": {}, "variants": []
        }))
        .unwrap_or_else(|e| panic!("{e}")),
    );
    m.metadata.namespace = Some("team".into());
    writers.mutation(watcher::Event::Apply(m));
    let found = tokio::time::timeout(PATIENCE, waiter).await;
    assert!(
        matches!(&found, Ok(Ok(Some((Some(name), version)))) if name == "web" && *version >= 1),
        "{found:?}"
    );
}

/// When the feeds are gone (shutdown), waiters are released with `None`.
#[tokio::test]
async fn waiters_are_released_when_the_feeds_stop() {
    let (caches, writers) = for_tests();
    let waiter = {
        let caches = caches.clone();
        tokio::spawn(async move { caches.listed(Cache::Secrets).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(writers);
    let woke = tokio::time::timeout(PATIENCE, waiter).await;
    assert!(matches!(woke, Ok(Ok(false))), "{woke:?}");
}

/// R34: caches are served from while synced and the API server answers;
/// once it has failed to answer for longer than the bound they are not, and its next answer
/// brings them back.
#[test]
fn caches_cut_off_from_the_api_server_are_not_served_from() {
    let health = Health::default();
    let freshness = Freshness {
        health: health.clone(),
        stale_after: Some(Duration::from_millis(30)),
        ..Freshness::default()
    };
    let (caches, mut writers) = for_tests_with(freshness);
    assert_eq!(caches.serving(), Serving::Starting);
    writers.sync();
    assert_eq!(caches.serving(), Serving::Yes);
    health.failed();
    assert_eq!(caches.serving(), Serving::Yes, "within the bound");
    std::thread::sleep(Duration::from_millis(40));
    assert!(matches!(caches.serving(), Serving::CutOff(d) if d >= Duration::from_millis(30)));
    health.answered();
    assert_eq!(caches.serving(), Serving::Yes);

    // Without a bound, failures never stop the serving.
    let (caches, mut writers) = for_tests_with(Freshness {
        health: health.clone(),
        stale_after: None,
        ..Freshness::default()
    });
    writers.sync();
    health.failed();
    std::thread::sleep(Duration::from_millis(40));
    assert_eq!(caches.serving(), Serving::Yes);
}

/// R34: a cache whose watch went silent is not served from until its watch has
/// listed again; a cache the API does not read (the generated Deployments) is listed again
/// without stopping the serving.
#[test]
fn caches_whose_watch_went_silent_are_not_served_from_until_listed_again() {
    let (caches, mut writers) = for_tests();
    writers.sync();
    assert_eq!(caches.serving(), Serving::Yes);
    writers.went_silent(Cache::Secrets);
    assert_eq!(caches.serving(), Serving::Stale(Cache::Secrets));
    let message = super::stale_message(Cache::Secrets);
    assert!(
        message.contains("watch of Mutations' Secrets went silent"),
        "{message}"
    );
    // Events of the restarted watch's list do not clear it; the end of the list does.
    writers.mutation(watcher::Event::Init);
    assert_eq!(caches.serving(), Serving::Stale(Cache::Secrets));
    writers.sync();
    assert_eq!(caches.serving(), Serving::Yes);
    writers.went_silent(Cache::Owners(OwnerKind::Mutation));
    assert_eq!(
        caches.serving(),
        Serving::Stale(Cache::Owners(OwnerKind::Mutation))
    );
    assert_eq!(
        Cache::Owners(OwnerKind::Mutation).to_string(),
        "Mutations",
        "as the messages name it"
    );
    writers.sync();
    writers.went_silent(Cache::Deployments(OwnerKind::Mutation));
    assert_eq!(caches.serving(), Serving::Yes);
}

/// R34: the watches are asked to end early unless the bound leaves room for more
/// than two bookmarks a minute apart; then after half of it, so that the bookmark the API
/// server sends 2 s before a watch's end comes in time. The default (120 s) is such a bound:
/// an idle watch once went 120 s without a bookmark in CI.
#[test]
fn watches_end_early_under_a_bound_of_two_bookmarks_or_less() {
    use super::stale::watch_timeout;
    let secs = |s| Some(Duration::from_secs(s));
    assert_eq!(watch_timeout(None), None);
    assert_eq!(
        watch_timeout(secs(120)),
        Some(60),
        "the default: a watch a minute, its last bookmark 2 s before its end"
    );
    assert_eq!(watch_timeout(secs(121)), None, "kube-runtime's 290 s");
    assert_eq!(watch_timeout(secs(3600)), None);
    assert_eq!(watch_timeout(secs(119)), Some(59));
    assert_eq!(watch_timeout(secs(8)), Some(4));
    assert_eq!(
        watch_timeout(secs(4)),
        Some(3),
        "a bookmark 2 s before the end"
    );
}
