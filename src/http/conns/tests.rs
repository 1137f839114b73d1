//! Unit tests of the connection caps: the listener's, an address's, and who makes room.

use super::*;

const HOME: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

fn ip(n: u8) -> IpAddr {
    IpAddr::V4(std::net::Ipv4Addr::new(192, 168, 1, n))
}

fn open(max: usize, protect: Duration) -> Arc<Open> {
    Open::new(max, protect, TrustedProxies::default())
}

fn admitted(open: &Open) -> (Arc<Slot>, u64, bool) {
    admitted_from(open, HOME)
}

fn admitted_from(open: &Open, addr: IpAddr) -> (Arc<Slot>, u64, bool) {
    match open.admit(addr) {
        Admit::Yes { slot, id, evicted } => (slot, id, evicted.is_some()),
        Admit::AddressFull => panic!("refused: the address holds its share"),
        Admit::Full => panic!("refused: full"),
    }
}

fn closing(slot: &Slot) -> bool {
    slot.lock().evicted
}

// R38: what a refused connection is told has a Content-Length that is its body's.
#[test]
fn refusals_say_their_length() {
    for refusal in [REFUSED_AT_CAP, REFUSED_FOR_ADDRESS] {
        let text = std::str::from_utf8(refusal).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(
            head.contains(&format!("Content-Length: {}\r\n", body.len())),
            "{text}"
        );
    }
}

// R34: at the cap an idle connection makes room; busy ones never do; when all are busy
// the new one is refused.
#[tokio::test(start_paused = true)]
async fn the_longest_idle_connection_makes_room() {
    let open = open(3, Duration::ZERO);
    let (a, _, _) = admitted_from(&open, ip(1));
    tokio::time::advance(Duration::from_secs(1)).await;
    let (b, _, _) = admitted_from(&open, ip(2));
    let (c, _, _) = admitted_from(&open, ip(3));
    let busy_a = a.busy();
    // a is busy: b is the longest idle of the others, old enough to go.
    tokio::time::advance(Duration::from_secs(1)).await;
    let (d, _, evicted) = admitted_from(&open, ip(4));
    assert!(evicted);
    assert_eq!(open.len(), 3);
    tokio::time::timeout(Duration::from_secs(1), b.evicted())
        .await
        .unwrap_or_else(|_| panic!("b must be told to close"));
    let (busy_c, busy_d) = (c.busy(), d.busy());
    assert!(matches!(open.admit(ip(5)), Admit::Full));
    // A request that ends makes its connection idle again, and so evictable.
    drop(busy_a);
    let (e, _, evicted) = admitted_from(&open, ip(5));
    assert!(evicted);
    let busy_e = e.busy();
    assert!(matches!(open.admit(ip(6)), Admit::Full));
    drop((busy_c, busy_d, busy_e));
}

#[tokio::test]
async fn a_connection_that_ends_frees_its_slot() {
    let open = open(1, Duration::ZERO);
    let (slot, id, _) = admitted(&open);
    drop(Leave(open.clone(), id, slot.clone()));
    tokio::time::timeout(Duration::from_secs(1), slot.gone())
        .await
        .unwrap_or_else(|_| panic!("the end of the connection is told"));
    assert_eq!(open.len(), 0);
    let (_, _, evicted) = admitted(&open);
    assert!(!evicted);
}

// R44: an address holds at most a quarter of the connections, below the listener's cap
// too: its fifth closes its own longest idle one, however young, once idle a second, and
// is refused when all four are busy, while other addresses still get in. A trusted proxy is held only to the
// listener's cap.
#[tokio::test(start_paused = true)]
async fn an_address_holds_at_most_its_quarter() {
    let open = Open::new(
        16,
        Duration::from_secs(5),
        TrustedProxies::parse("10.42.0.0/16").unwrap(),
    );
    assert_eq!(open.per_address(), 4);
    let host = ip(66);
    let mut four = Vec::new();
    for _ in 0..4 {
        four.push(admitted_from(&open, host));
        tokio::time::advance(Duration::from_millis(10)).await;
    }
    // Its next request may be on its way in one of them: refused, not cut off.
    assert!(matches!(open.admit(host), Admit::AddressFull));
    tokio::time::advance(Duration::from_secs(1)).await;
    let (fifth, _, evicted) = admitted_from(&open, host);
    assert!(evicted, "its own longest idle connection makes room");
    assert!(closing(&four[0].0));
    assert!(!four[1..].iter().any(|(slot, _, _)| closing(slot)));
    assert_eq!(open.len(), 4, "the evicted one's slot is free at once");
    let _busy: Vec<_> = four[1..]
        .iter()
        .map(|(slot, _, _)| slot.busy())
        .chain([fifth.busy()])
        .collect();
    assert!(matches!(open.admit(host), Admit::AddressFull));
    let (_, _, evicted) = admitted_from(&open, ip(67));
    assert!(!evicted);
    // The proxy's connections are many clients': up to the listener's cap.
    let proxy = IpAddr::V4(std::net::Ipv4Addr::new(10, 42, 0, 12));
    let from_proxy: Vec<_> = (0..11).map(|_| admitted_from(&open, proxy)).collect();
    assert!(from_proxy.iter().all(|(_, _, evicted)| !evicted));
    assert_eq!(open.len(), 16);
    // The share of a small listener is at least one connection.
    assert_eq!(
        Open::new(3, Duration::ZERO, TrustedProxies::default()).per_address(),
        1
    );
}

// R34, R44: at the cap, what addresses hold is levelled. Hosts that reopen their
// connections every few seconds (always young) lose one to a newcomer holding two fewer;
// a young connection of an address holding one more than the newcomer stays (a board in a
// slow handshake); an old idle one goes to an address holding fewer; failing all that the
// newcomer's own idle connection makes room.
#[tokio::test(start_paused = true)]
async fn at_the_cap_the_address_holding_the_most_makes_room() {
    let open = open(8, Duration::from_secs(5));
    assert_eq!(open.per_address(), 2);
    let (t1, t2, d1, d2) = (ip(2), ip(3), ip(4), ip(5));
    let mut held = Vec::new();
    for addr in [t1, t1, t2, t2, d1, d1, d2, d2] {
        held.push((addr, admitted_from(&open, addr)));
        tokio::time::advance(Duration::from_millis(10)).await;
    }
    tokio::time::advance(Duration::from_secs(1)).await;
    // d1 and d2 keep theirs busy.
    let _busy: Vec<_> = held
        .iter()
        .filter(|(addr, _)| *addr == d1 || *addr == d2)
        .map(|(_, (slot, _, _))| slot.busy())
        .collect();
    // A board holding nothing gets in: the longest idle of an address holding two.
    let board = ip(50);
    let (board_slot, _, evicted) = admitted_from(&open, board);
    assert!(evicted);
    assert!(closing(&held[0].1.0), "t1's longest idle connection");
    // t1 (one now) reopens: nobody holds two more than it, the board's young one stays;
    // its own idle connection makes room.
    let (_, _, evicted) = admitted_from(&open, t1);
    assert!(evicted);
    assert!(closing(&held[1].1.0));
    assert!(!closing(&board_slot));
    // Another newcomer: t2 holds two, so one of its goes; then nobody may be closed for a
    // third newcomer, as the board's and t1's hold one each and are young.
    let (_, _, evicted) = admitted_from(&open, ip(51));
    assert!(evicted && closing(&held[2].1.0));
    assert!(matches!(open.admit(ip(52)), Admit::Full));
    assert!(!closing(&board_slot));
    // Once older than 5 s, an idle connection goes to an address holding fewer.
    tokio::time::advance(Duration::from_secs(5)).await;
    let (_, _, evicted) = admitted_from(&open, ip(52));
    assert!(evicted);
}

// R34, R44: a connection's slot is free once the connection is shut down, before its task has
// dropped the stream: the client sees the end only after that, so its next connection is
// never counted beside the one it has seen closed.
#[tokio::test]
async fn a_slot_is_free_once_its_connection_is_shut_down() {
    use tokio::io::AsyncWriteExt;
    let open = open(4, Duration::from_secs(30));
    let (slot, id, _) = admitted(&open);
    let (server, _client) = tokio::io::duplex(64);
    let leave = Leave(open.clone(), id, slot);
    let mut stream =
        super::super::deadline::WriteDeadline::new(server, Duration::from_secs(1), leave);
    assert_eq!(open.len(), 1);
    stream.shutdown().await.unwrap();
    assert_eq!(
        open.len(),
        0,
        "the slot is held until the stream is dropped"
    );
    // Its address may open its one connection (a quarter of 4) again at once.
    let (_again, _, evicted) = admitted(&open);
    assert!(!evicted);
    drop(stream);
    assert_eq!(open.len(), 1);
}
