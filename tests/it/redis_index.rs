//! The Redis index: the shared conformance suite, plus what only Redis has (TTLs,
//! concurrency across connections, Redis Cluster, the eviction-policy guard).
//! Every test starts its own `redis-server` (tests/support); none uses 6379.

use crate::conformance;
use crate::support;

use std::collections::{BTreeSet, HashMap};
use std::time::{SystemTime, UNIX_EPOCH};

use conformance::{config, entry, flip, fp, sketch, S};
use simdedup::index::{Index, IndexEntry, IndexError, RedisIndex, RedisIndexOptions, Verdict};
use support::{RedisCluster, RedisServer};

async fn connect(url: &str, ns: &str) -> RedisIndex {
    RedisIndex::connect(url, ns, config(), RedisIndexOptions::default())
        .await
        .expect("connect to the test redis-server")
}

macro_rules! run {
    ($case:ident) => {
        #[tokio::test]
        async fn $case() {
            let server = RedisServer::start();
            let idx = connect(&server.url(), "conf").await;
            conformance::$case(&idx).await;
        }
    };
}

conformance_cases!(run);

/// Options shaping a namespace's buckets for 10 M articles per window (shape 16
/// bits): one block set per block position (`b:L:P:XXXX`) instead of sets shared
/// by the four positions.
fn large_buckets() -> RedisIndexOptions {
    RedisIndexOptions {
        expected_articles: 10_000_000,
        ..RedisIndexOptions::default()
    }
}

/// The whole conformance suite again on large buckets.
mod positional_block_sets {
    use super::*;

    macro_rules! run_large {
        ($case:ident) => {
            #[tokio::test]
            async fn $case() {
                let server = RedisServer::start();
                let idx = RedisIndex::connect(&server.url(), "conf", config(), large_buckets())
                    .await
                    .expect("connect to the test redis-server");
                crate::conformance::$case(&idx).await;
            }
        };
    }

    conformance_cases!(run_large);
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn keys_of(conn: &mut redis::Connection, ns: &str) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("simdedup:{{{ns}}}:*"))
        .query(conn)
        .unwrap();
    keys.sort();
    keys
}

#[tokio::test]
async fn every_key_carries_a_ttl_within_window_plus_bucket() {
    let server = RedisServer::start();
    let idx = connect(&server.url(), "ttl").await;
    let t = now_ms();
    for g in 0..20u64 {
        let base = S.rotate_left(g as u32 * 3) ^ g;
        for k in 0..3u64 {
            let e = entry(
                &format!("g{g}-{k}"),
                t - (g as i64) * 3_600_000,
                fp(base ^ (1 << k), g * 10 + k, &sketch(g, 12)),
            );
            idx.check_and_insert(&e).await.unwrap();
        }
    }
    assert!(idx.delete("g3-0").await.unwrap().found);
    let mut conn = server.connection();
    assert_card_keys_expire(&mut conn, "ttl", idx.bucket_ms());
}

/// A root's links: in its `d:` field while they fit in `LINKS_INLINE_BYTES`,
/// then appended to its own string, which expires with the root's bucket and
/// goes when the root is deleted.
#[tokio::test]
async fn a_roots_links_outgrow_its_field_into_a_string_appended_to() {
    use simdedup::keys::LINKS_INLINE_BYTES;
    let server = RedisServer::start();
    let idx = connect(&server.url(), "links").await;
    let t = now_ms();
    let story = fp(S, 1, &sketch(1, 12));
    idx.check_and_insert(&entry("root", t, story.clone()))
        .await
        .unwrap();
    insert_copies(&idx, "c", 40, t, &story).await;
    let (label, h) = idx.locate("root").await.unwrap().unwrap();
    let k = idx.keys();
    let mut c = server.connection();
    let field = simdedup::keys::slot(h).to_string();
    let inline: String = redis::cmd("HGET")
        .arg(k.links(&label, h))
        .arg(&field)
        .query(&mut c)
        .unwrap();
    let more: String = redis::cmd("GET")
        .arg(k.more_links(&label, h))
        .query(&mut c)
        .unwrap();
    assert!(
        inline.len() <= LINKS_INLINE_BYTES && inline.len() + 20 > LINKS_INLINE_BYTES,
        "{inline}"
    );
    let links: Vec<&str> = inline
        .split(' ')
        .chain(more.split_ascii_whitespace())
        .collect();
    assert_eq!(links.len(), 40, "{inline} | {more}");
    assert_eq!(links[0], format!("{label}:{}", h + 1));
    assert_eq!(links[39], format!("{label}:{}", h + 40));
    let ttl: i64 = redis::cmd("TTL")
        .arg(k.more_links(&label, h))
        .query(&mut c)
        .unwrap();
    let limit = (idx.bucket_ms() + conformance::WINDOW) / 1000;
    assert!(ttl > 0 && ttl <= limit, "TTL {ttl}");
    assert!(idx.delete("root").await.unwrap().found);
    let exists: bool = redis::cmd("EXISTS")
        .arg(k.more_links(&label, h))
        .query(&mut c)
        .unwrap();
    assert!(!exists);
}

#[tokio::test]
async fn large_buckets_have_one_block_set_per_position() {
    let server = RedisServer::start();
    let idx = RedisIndex::connect(&server.url(), "big", config(), large_buckets())
        .await
        .unwrap();
    let t = now_ms();
    // Blocks 0123 4567 0123 cdef: one value at two positions.
    let a = entry("a", t, fp(0x0123_4567_0123_cdef, 1, &sketch(1, 12)));
    assert_eq!(
        idx.check_and_insert(&a).await.unwrap().verdict,
        Verdict::UNIQUE
    );
    let label = idx_label(&idx, t);
    let mut conn = server.connection();
    let sets: Vec<String> = keys_of(&mut conn, "big")
        .into_iter()
        .filter(|k| k.starts_with("simdedup:{big}:b:"))
        .collect();
    let expect: Vec<String> = ["0:0123", "1:4567", "2:0123", "3:cdef"]
        .iter()
        .map(|p| format!("simdedup:{{big}}:b:{label}:{p}"))
        .collect();
    assert_eq!(sets, expect);
    for set in &sets {
        let ttl: i64 = redis::cmd("TTL").arg(set).query(&mut conn).unwrap();
        assert!(ttl > 0, "{set} has no expiry (TTL {ttl})");
    }
    assert_eq!(
        idx.keys().block(&label, 17, 2, 0x0123),
        format!("simdedup:{{big}}:b:{label}:2:0123")
    );
    // A neighbour 3 bits away (last block changed) is found through the position sets.
    let b = entry(
        "b",
        t + 1,
        fp(0x0123_4567_0123_cdef ^ 0b111, 2, &sketch(2, 12)),
    );
    assert!(matches!(
        idx.check_and_insert(&b).await.unwrap().verdict,
        Verdict::Duplicate(d) if d.dup_of == "a"
    ));
}

/// A bucket is shaped by the size of the bucket before it, but never more than
/// one bit smaller: that bucket may still be filling (a backfill, a feed out of
/// time order), and a bucket shaped far too small turns its hashes into hash
/// tables.
#[tokio::test]
async fn a_new_bucket_is_at_most_one_shape_bit_smaller() {
    let server = RedisServer::start();
    let idx = connect(&server.url(), "shape").await;
    let t = now_ms();
    let yesterday = t - 24 * 3_600_000;
    let shape = |label: &str| {
        let mut conn = server.connection();
        let k: String = redis::cmd("HGET")
            .arg(idx.keys().counter(label))
            .arg("k")
            .query(&mut conn)
            .unwrap();
        k
    };
    idx.check_and_insert(&entry("old", yesterday, fp(S, 1, &sketch(1, 12))))
        .await
        .unwrap();
    // The first bucket: shaped for expected_articles (1 M per 48 h window).
    assert_eq!(shape(&idx_label(&idx, yesterday)), "12");
    // One article in it would shape the next for 128 (k = 0): 11 instead.
    idx.check_and_insert(&entry("new", t, fp(!S, 2, &sketch(2, 12))))
        .await
        .unwrap();
    assert_eq!(shape(&idx_label(&idx, t)), "11");
}

/// Commits Redis ran since the last `CONFIG RESETSTAT`: script calls
/// (`EVALSHA`) less the catch-ups' (`lua/catch_up.lua`, which runs the only
/// `XRANGE`).
fn commits_run(conn: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(conn).unwrap();
    let calls = |command: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
            .and_then(|rest| rest.split(',').next()?.parse().ok())
            .unwrap_or(0u64)
    };
    calls("evalsha") - calls("xrange")
}

/// An article that shares only a boilerplate sketch hash with a check — a hash
/// whose list already names 8 articles, so it is never appended to — changes
/// nothing the check found: its commit goes through the first time. The same
/// insert through a list that was not full makes the check catch up and
/// decide again. The insert comes from another process, after the view the
/// check decides on.
#[tokio::test]
async fn an_insert_through_a_full_list_is_no_conflict() {
    let server = RedisServer::start();
    let idx = connect(&server.url(), "fulllist").await;
    let other = connect(&server.url(), "fulllist").await;
    let mut conn = server.connection();
    let t = now_ms();
    // Sketches: one small (so indexed) shared hash, and 11 of the article's own.
    let with = |shared: u32, seed: u64| {
        let mut s: Vec<u32> = sketch(seed, 11).into_iter().map(|h| h | 1 << 31).collect();
        s.push(shared);
        s
    };
    let (boilerplate, rare) = (7, 9);
    for i in 0..8u64 {
        let filler = entry(
            &format!("filler-{i}"),
            t,
            fp(
                0xa0a0_b0b0_c0c0_d0d0 ^ (i * 0x0101_0101_0101_0101),
                100 + i,
                &with(boilerplate, 100 + i),
            ),
        );
        idx.check_and_insert(&filler).await.unwrap();
    }
    // SimHashes with no 16-bit block in common with any other here.
    for (shared, full, b_hash, a_hash) in [
        (
            boilerplate,
            true,
            0x5555_6666_7777_8888,
            0x1111_2222_3333_4444,
        ),
        (rare, false, 0x9999_aaaa_bbbb_cccc, 0x1234_5678_9abc_def0),
    ] {
        let s = u64::from(shared);
        let b = entry(&format!("b-{s}"), t, fp(b_hash, s, &with(shared, s)));
        idx.catch_up().await.unwrap();
        // Stored after b's view: shares the hash, no block, no content.
        let a = entry(
            &format!("a-{s}"),
            t,
            fp(a_hash, 50 + s, &with(shared, 50 + s)),
        );
        assert_eq!(
            other.check_and_insert(&a).await.unwrap().verdict,
            Verdict::UNIQUE
        );
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query(&mut conn)
            .unwrap();
        let out = idx.check_and_insert_on_the_view_as_is(&b).await.unwrap();
        assert_eq!(out.verdict, Verdict::UNIQUE, "one shared hash of twelve");
        let expected = if full { 1 } else { 2 };
        assert_eq!(
            commits_run(&mut conn),
            expected,
            "list of hash {shared} full: {full}"
        );
    }
}

/// The commit reads back the recent records of what was inserted since a
/// view. An article whose sketch is longer than a record holds (more than 12
/// hashes), meeting a check only through a hash past the 12th, still sends
/// the check back to catch up (its packed fingerprint is read instead); an
/// article deleted since (its record marked) does not. The inserts and the
/// deletes come from another process, after the view the check decides on.
#[tokio::test]
async fn what_was_inserted_since_is_read_whole_and_deletes_are_skipped() {
    let server = RedisServer::start();
    let idx = connect(&server.url(), "recent").await;
    let other = connect(&server.url(), "recent").await;
    let mut conn = server.connection();
    let t = now_ms();
    // The bucket exists before the views the checks decide on.
    let first = entry("first", t, fp(0x9999_aaaa_bbbb_cccc, 1, &sketch(1, 12)));
    idx.check_and_insert(&first).await.unwrap();
    // One hash both share, the smallest of the check's sketch (a lookup
    // hash) and the largest of the other's 16 (or 12).
    let shared = 1_000u32;
    // SimHashes with no 16-bit block in common.
    for (round, len, deleted, commits) in [(0u64, 16, false, 2), (1, 16, true, 1), (2, 12, true, 1)]
    {
        let r = round as u32;
        let other_sketch: Vec<u32> = (1 + 20 * r..len + 20 * r).chain([shared]).collect();
        let own: Vec<u32> = [shared]
            .into_iter()
            .chain(sketch(5 + round, 11).into_iter().map(|h| h | 1 << 31))
            .collect();
        let mask = round * 0x0f0f_0f0f_0f0f_0f0f;
        let b = entry(
            &format!("b-{round}"),
            t,
            fp(0x1111_2222_3333_4444 ^ mask, 10 + round, &own),
        );
        idx.catch_up().await.unwrap();
        let a = entry(
            &format!("a-{round}"),
            t,
            fp(0x5555_6666_7777_8888 ^ mask, 20 + round, &other_sketch),
        );
        assert_eq!(
            other.check_and_insert(&a).await.unwrap().verdict,
            Verdict::UNIQUE
        );
        if deleted {
            assert!(other.delete(&a.id).await.unwrap().found);
        }
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query(&mut conn)
            .unwrap();
        let out = idx.check_and_insert_on_the_view_as_is(&b).await.unwrap();
        assert_eq!(out.verdict, Verdict::UNIQUE, "one shared hash of 12");
        assert_eq!(
            commits_run(&mut conn),
            commits,
            "sketch of {len} hashes, deleted since: {deleted}"
        );
    }
}

/// A bucket whose counter hash has expired (its retention is over; its other
/// keys go with it) but that the registry still lists until the next bucket
/// opens: a view that held its articles lets it go, and the article that
/// opens the next bucket is stored, by a process whose view held the old
/// bucket and by one that never did.
#[tokio::test]
async fn a_bucket_past_its_retention_does_not_hold_up_the_next() {
    let server = RedisServer::start();
    let idx = connect(&server.url(), "expired").await;
    let mut conn = server.connection();
    let t = now_ms();
    let old = entry("old", t, fp(0x1111_2222_3333_4444, 1, &sketch(1, 12)));
    assert_eq!(
        idx.check_and_insert(&old).await.unwrap().verdict,
        Verdict::UNIQUE
    );
    idx.catch_up().await.unwrap();
    assert_eq!(idx.view_articles(), 1);
    // Its n: hash expires first: the registry lists the bucket until a
    // commit opens a new one.
    let label = idx_label(&idx, t);
    let deleted: i64 = redis::cmd("DEL")
        .arg(idx.keys().counter(&label))
        .query(&mut conn)
        .unwrap();
    assert_eq!(deleted, 1);
    let day = 24 * 3_600_000;
    let next = entry(
        "next",
        t + day,
        fp(0x5555_6666_7777_8888, 2, &sketch(2, 12)),
    );
    let out = idx
        .check_and_insert(&next)
        .await
        .expect("the next bucket opens");
    assert_eq!(out.verdict, Verdict::UNIQUE);
    let fresh = connect(&server.url(), "expired").await;
    let later = entry(
        "later",
        t + day,
        fp(0x9999_aaaa_bbbb_cccc, 3, &sketch(3, 12)),
    );
    assert_eq!(
        fresh.check_and_insert(&later).await.unwrap().verdict,
        Verdict::UNIQUE
    );
    let replay = idx.check_and_insert(&later).await.unwrap();
    assert_eq!(
        (replay.verdict, replay.replayed, replay.examined),
        (Verdict::UNIQUE, true, 0)
    );
}

/// A check's receipt names where its write can be read back: the `a:`
/// element it stored, which a replay of the same id names too; a delete
/// empties it. (The ack of a worker's entry holds only where it reads so.)
#[tokio::test]
async fn a_receipt_names_the_element_a_check_stored() {
    let server = RedisServer::start();
    let idx = connect(&server.url(), "receipt").await;
    let mut conn = server.connection();
    let element = |conn: &mut redis::Connection, key: &str, index: u64| -> Option<Vec<u8>> {
        redis::cmd("LINDEX")
            .arg(key)
            .arg(index)
            .query(conn)
            .unwrap()
    };
    let e = entry("a", now_ms(), fp(0x1111_2222_3333_4444, 1, &sketch(1, 12)));
    let first = idx.check_and_insert(&e).await.unwrap();
    let receipt = first.receipt.expect("a stored article has a receipt");
    assert!(receipt.key.starts_with(idx.keys().prefix()));
    assert_eq!(
        element(&mut conn, &receipt.key, receipt.index),
        Some(receipt.element.clone())
    );
    let replay = idx.check_and_insert(&e).await.unwrap();
    assert!(replay.replayed);
    assert_eq!(replay.receipt.as_ref(), Some(&receipt));
    assert!(
        idx.query(&e).await.unwrap().receipt.is_none(),
        "a query stores nothing"
    );
    assert!(idx.delete("a").await.unwrap().found);
    assert_eq!(
        element(&mut conn, &receipt.key, receipt.index),
        Some(Vec::new())
    );
}

/// An article record that cannot be read (written by hand here) holds up
/// nothing: a new process loads its view past it, a process that finds it as
/// a candidate skips it, and every other article is checked as before.
#[tokio::test]
async fn an_unreadable_article_record_holds_up_nothing() {
    let server = RedisServer::start();
    let idx = connect(&server.url(), "unreadable").await;
    let mut conn = server.connection();
    let t = now_ms();
    let a = entry("a", t, fp(0x1111_2222_3333_4444, 1, &sketch(1, 12)));
    let b = entry("b", t, fp(0x5555_6666_7777_8888, 2, &sketch(2, 12)));
    for e in [&a, &b] {
        assert_eq!(
            idx.check_and_insert(e).await.unwrap().verdict,
            Verdict::UNIQUE
        );
    }
    // A process whose view filed it before, without reading it.
    let filed = connect(&server.url(), "unreadable").await;
    filed.catch_up().await.unwrap();
    let (label, handle) = idx.locate("a").await.unwrap().unwrap();
    let _: () = redis::cmd("LSET")
        .arg(idx.keys().articles(&label, handle))
        .arg(simdedup::keys::slot(handle))
        .arg("\x05\x00garbage")
        .query(&mut conn)
        .unwrap();
    let fresh = connect(&server.url(), "unreadable").await;
    fresh
        .catch_up()
        .await
        .expect("the view loads past the record");
    assert_eq!((fresh.view_articles(), filed.view_articles()), (1, 2));
    let copy_of = |e: &IndexEntry| IndexEntry {
        id: format!("{}-copy", e.id),
        ..e.clone()
    };
    for process in [&fresh, &filed] {
        let out = process.query(&copy_of(&b)).await.unwrap();
        assert_eq!(out.verdict.duplicate().unwrap().dup_of, "b");
        // A copy of the unreadable article finds nothing to match.
        let out = process.query(&copy_of(&a)).await.unwrap();
        assert_eq!(out.verdict, Verdict::UNIQUE);
    }
    let c = entry("c", t, fp(0x9999_aaaa_bbbb_cccc, 3, &sketch(3, 12)));
    assert_eq!(
        fresh.check_and_insert(&c).await.unwrap().verdict,
        Verdict::UNIQUE
    );
}

/// A view that is behind Redis (another process stored articles since) still
/// gives the verdict a check made now would give: through each signal, for
/// an id stored in between, and the same as a plain check when nothing was
/// stored since. The commit finds what was stored since and sends the check
/// back to catch up.
#[tokio::test]
async fn a_stale_view_gives_the_verdict_of_now() {
    let server = RedisServer::start();
    let (idx, other) = (
        connect(&server.url(), "stale").await,
        connect(&server.url(), "stale").await,
    );
    let t = conformance::base();
    let as_is = |e: IndexEntry| {
        let idx = idx.clone();
        async move { idx.check_and_insert_on_the_view_as_is(&e).await.unwrap() }
    };
    // Something stored first, so that the bucket exists in the view: only
    // what was stored since can then make it stale.
    idx.check_and_insert(&entry("seed", t - 1, fp(0x0123_4567_89ab_cdef, 99, &[])))
        .await
        .unwrap();
    idx.catch_up().await.unwrap();
    let sketch_a = sketch(1, 12);
    // 12 bits apart, 3 in each block (as `flip(12)` from `S`): no block shared.
    let (t_orig, t_copy) = (0x5a5a_3c3c_a5a5_c3c3, 0x5a5a_3c3c_a5a5_c3c3 ^ S ^ flip(12));
    let copies = [
        entry("exact", t + 10, fp(!S, 7, &[])),
        entry("near", t + 11, fp(flip(3), 8, &[])),
        entry("sentence", t + 12, fp(t_copy, 9, &sketch_a)),
        entry("twice", t + 13, fp(0x1234_5678_9abc_def0, 10, &[])),
    ];
    // Stored by the other process, after idx's view.
    for e in [
        entry("o-exact", t, fp(S ^ 0xff00_ff00, 7, &[])),
        entry("o-near", t + 1, fp(S, 1, &[])),
        entry("o-sentence", t + 2, fp(t_orig, 2, &sketch_a)),
    ] {
        other.check_and_insert(&e).await.unwrap();
    }
    // Stored in between under the id checked: a replay.
    let twice = other.check_and_insert(&copies[3]).await.unwrap();
    assert_eq!((twice.verdict, twice.replayed), (Verdict::UNIQUE, false));
    use simdedup::decision::Signal;
    let dup = |root: &str, distance, signal: Signal| {
        Verdict::Duplicate(simdedup::index::Duplicate {
            dup_of: root.into(),
            matched: root.into(),
            distance,
            signal,
            // Whole sketches shared, or none (the articles without one).
            overlap: Some(if signal == Signal::Sentence { 100 } else { 0 }),
        })
    };
    assert_eq!(
        as_is(copies[0].clone()).await.verdict,
        dup("o-exact", 64 - 16, Signal::Exact)
    );
    assert_eq!(
        as_is(copies[1].clone()).await.verdict,
        dup("o-near", 3, Signal::Simhash)
    );
    assert_eq!(
        as_is(copies[2].clone()).await.verdict,
        dup("o-sentence", 12, Signal::Sentence)
    );
    let replay = as_is(copies[3].clone()).await;
    assert!(replay.replayed, "{replay:?}");
    assert_eq!(replay.verdict, Verdict::UNIQUE);
    // Nothing stored since: the same as a plain check, and then a replay.
    let fresh = entry("fresh", t + 20, fp(0x5555_aaaa_3333_cccc, 11, &[]));
    assert_eq!(as_is(fresh.clone()).await.verdict, Verdict::UNIQUE);
    let again = as_is(fresh).await;
    assert!(
        again.replayed && again.verdict == Verdict::UNIQUE,
        "{again:?}"
    );
}

#[tokio::test]
async fn articles_past_their_retention_are_decided_but_not_stored() {
    let server = RedisServer::start();
    let idx = connect(&server.url(), "old").await;
    let old = now_ms() - 4 * 24 * 3_600_000;
    let out = idx
        .check_and_insert(&entry("old", old, fp(S, 1, &[])))
        .await
        .unwrap();
    assert_eq!((out.verdict, out.replayed), (Verdict::UNIQUE, false));
    assert_eq!(idx.get("old").await.unwrap(), None);
    // Nothing but the namespace's history token, which a view reads at
    // its first catch-up.
    assert_eq!(
        keys_of(&mut server.connection(), "old"),
        vec!["simdedup:{old}:history".to_owned()]
    );
}

/// The walkthrough in docs/redis-keys.md relies on these names and values.
#[tokio::test]
async fn key_layout_is_the_documented_one() {
    let server = RedisServer::start();
    let idx = connect(&server.url(), "news").await;
    let t = now_ms();
    let a = entry(
        "article-1",
        t,
        fp(0x0123_4567_89ab_cdef, 0xfeed, &[0xaaaa_bbbb]),
    );
    idx.check_and_insert(&a).await.unwrap();
    let b = entry("article-2", t, fp(0x0123_4567_89ab_cdee, 0xbeef, &[]));
    idx.check_and_insert(&b).await.unwrap();
    let (label, h1) = idx.locate("article-1").await.unwrap().unwrap();
    let (label2, h2) = idx.locate("article-2").await.unwrap().unwrap();
    assert_eq!((label2.as_str(), h1, h2), (label.as_str(), 1, 2));
    assert_eq!(label, simdedup::keys::bucket_label(idx.bucket_start(t)));
    let k = idx.keys();
    let mut c = server.connection();
    let q = |c: &mut redis::Connection, cmd: &[&str]| -> redis::Value {
        let mut r = redis::cmd(cmd[0]);
        for a in &cmd[1..] {
            r.arg(*a);
        }
        r.query(c).unwrap()
    };
    let s = |v: redis::Value| -> String { redis::from_redis_value(v).unwrap() };
    assert_eq!(
        s(q(
            &mut c,
            &["HGET", &k.ids(&label, 12, "article-1"), "article-1"]
        )),
        "0123456789abcdef:1"
    );
    // As docs/redis-keys.md computes the name: the top 12 bits of the id's SHA-1.
    assert_eq!(
        k.ids(&label, 12, "article-1"),
        format!("simdedup:{{news}}:i:{label}:897")
    );
    // The bucket's counter and shape: a first bucket is shaped for
    // expected_articles (1 M per 48 h window, so 500,000 per 24 h bucket).
    assert_eq!(
        s(q(&mut c, &["HGET", &k.counter(&label), "k"])),
        simdedup::keys::shape_bits(500_000).to_string()
    );
    assert_eq!(s(q(&mut c, &["HGET", &k.counter(&label), "k"])), "12");
    assert_eq!(s(q(&mut c, &["HGET", &k.counter(&label), "n"])), "2");
    // And how long its keys live after it starts: 24 h bucket + 48 h window.
    assert_eq!(
        s(q(&mut c, &["HGET", &k.counter(&label), "r"])),
        (72 * 3_600_000).to_string()
    );
    // And the key layout it was written with: l = 4.
    let fields: Vec<String> =
        redis::from_redis_value(q(&mut c, &["HKEYS", &k.counter(&label)])).unwrap();
    assert_eq!(fields, ["n", "k", "r", "l"]);
    assert_eq!(s(q(&mut c, &["HGET", &k.counter(&label), "l"])), "4");
    // Handle 1's recent record, as the walkthrough shows its first 24 bytes:
    // 1 + one sketch hash, the id hash's top 24 bits, SimHash, content hash,
    // the sketch hash (little-endian), then zeros to 68 bytes.
    let record: Vec<u8> =
        redis::from_redis_value(q(&mut c, &["GETRANGE", &k.recent(&label), "68", "135"])).unwrap();
    let mut expected = vec![2u8, 0x89, 0x7c, 0xad];
    expected.extend_from_slice(&0x0123_4567_89ab_cdef_u64.to_le_bytes());
    expected.extend_from_slice(&0xfeed_u64.to_le_bytes());
    expected.extend_from_slice(&0xaaaa_bbbb_u32.to_le_bytes());
    expected.resize(68, 0);
    assert_eq!(record, expected);
    // Handle 2's follows it; slot 0 (handle 256, 512, …) is not written yet.
    let both: Vec<u8> = redis::from_redis_value(q(&mut c, &["GET", &k.recent(&label)])).unwrap();
    assert_eq!(
        (both.len(), both[136], &both[..68]),
        (3 * 68, 1, &[0u8; 68][..])
    );
    // Block sets hold the articles' handles.
    let members: Vec<String> =
        redis::from_redis_value(q(&mut c, &["SMEMBERS", &k.block(&label, 12, 0, 0x0123)])).unwrap();
    assert_eq!(members, vec!["1", "2"]);
    assert_eq!(
        k.block(&label, 12, 0, 0x0123),
        format!("simdedup:{{news}}:b:{label}:0123")
    );
    let members: Vec<String> =
        redis::from_redis_value(q(&mut c, &["SMEMBERS", &k.block(&label, 12, 3, 0xcdef)])).unwrap();
    assert_eq!(members, vec!["1"]);
    let offset = t - idx.bucket_start(t);
    // The a: list of chunk 0: an empty element for handle 0, then handles 1
    // and 2, each its packed fingerprint's length (u16 LE), the packed
    // fingerprint and the meta.
    let articles: Vec<Vec<u8>> =
        redis::from_redis_value(q(&mut c, &["LRANGE", &k.articles(&label, 1), "0", "-1"])).unwrap();
    assert_eq!(articles.len(), 3);
    assert!(articles[0].is_empty());
    let split = |a: &[u8]| -> (Vec<u8>, String) {
        let len = usize::from(u16::from_le_bytes([a[0], a[1]]));
        (
            a[2..2 + len].to_vec(),
            String::from_utf8(a[2 + len..].to_vec()).unwrap(),
        )
    };
    let (packed, meta) = split(&articles[1]);
    assert_eq!(meta, format!("{offset}|40|u|article-1"));
    // Signal `h`, overlap 0.00: the two share no sketch hash.
    assert_eq!(
        split(&articles[2]).1,
        format!("{offset}|40|d|1|h0|9|article-1article-2")
    );
    assert_eq!(
        s(q(&mut c, &["HGET", &k.links(&label, 1), "1"])),
        format!("{label}:2")
    );
    // simhash, content, one sketch hash, no numbers, no shingles, then the
    // size, the shingle gaps' width and the three counts.
    assert_eq!(packed.len(), 16 + 4 + 6);
    assert_eq!(
        articles[1][..28],
        *b"\x1a\x00\xef\xcd\xab\x89gE#\x01\xed\xfe\x00\x00\x00\x00\x00\x00\xbb\xbb\xaa\xaa\x00\x00\x00\x01\x00\x00"
    );
    let back = simdedup::index::redis_index::decode_fingerprint(&packed, 40).unwrap();
    assert_eq!(back, a.fingerprint);
    let buckets: Vec<String> =
        redis::from_redis_value(q(&mut c, &["ZRANGE", &k.buckets(), "0", "-1"])).unwrap();
    assert_eq!(buckets, vec![label]);
}

/// Groups of near-duplicates (every pair of a group matches, by exact, SimHash
/// or sentence signal), all copies checked at once from several connections.
/// However they interleave, each group keeps exactly one article.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_near_duplicates_keep_exactly_one_per_group() {
    race_near_duplicate_groups(RedisIndexOptions::default(), 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_near_duplicates_keep_one_per_group_with_positional_block_sets() {
    race_near_duplicate_groups(large_buckets(), 4).await;
}

/// Every copy through one process: its checks decide from one view while the
/// others' commits are in flight, so near-duplicates are kept apart only by
/// each commit's validation of what was stored since.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_near_duplicates_in_one_process_keep_one_per_group() {
    race_near_duplicate_groups(RedisIndexOptions::default(), 1).await;
}

/// What one process stores and deletes, another process' view learns (the
/// new handles' entries, the deletion log); every key expires.
#[tokio::test]
async fn views_follow_each_other() {
    let server = RedisServer::start();
    let open = |()| {
        let url = server.url();
        async move {
            RedisIndex::connect(&url, "rep", config(), RedisIndexOptions::default())
                .await
                .expect("connect to the test redis-server")
        }
    };
    let (a, b) = (open(()).await, open(()).await);
    let t = now_ms();
    let original = entry("orig", t, fp(S, 1, &sketch(1, 12)));
    assert_eq!(
        a.check_and_insert(&original).await.unwrap().verdict,
        Verdict::UNIQUE
    );
    // b has never seen it: its view learns it at its check.
    let copy = entry("copy", t + 1, fp(S ^ 1, 2, &sketch(2, 12)));
    let out = b.check_and_insert(&copy).await.unwrap();
    assert_eq!(
        out.verdict.duplicate().map(|d| d.dup_of.as_str()),
        Some("orig")
    );
    // Its own insert too, filed at once.
    assert_eq!(b.view_articles(), 2);
    // Deleted through a: b forgets it, so a third copy is kept, not linked to
    // a deleted article (the second copy is its only near neighbour: distance 2).
    assert!(a.delete("orig").await.unwrap().found);
    assert!(a.delete("copy").await.unwrap().found);
    // Another process' deletions reach b's checks once b's view is older than
    // CATCH_UP_EVERY (5 ms): a check then catches the view up before deciding.
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let third = entry("third", t + 2, fp(S ^ 2, 3, &sketch(3, 12)));
    assert_eq!(
        b.check_and_insert(&third).await.unwrap().verdict,
        Verdict::UNIQUE
    );
    b.catch_up().await.unwrap();
    assert_eq!(b.view_articles(), 1);
    // A new process loads what is there.
    let c = open(()).await;
    c.catch_up().await.unwrap();
    assert_eq!(c.view_articles(), 1);
    // Every key, the deletion log too, expires. (The
    // d: hash whose links were deleted stays, empty but for its "" field, until
    // it expires: the same as an i: hash.)
    let mut conn = server.connection();
    assert_card_keys_expire(&mut conn, "rep", a.bucket_ms());
}

/// A namespace written with an earlier key layout (fingerprints and metas in
/// `f:` and `m:` hashes: `l = 1` in its buckets' counter hashes; no recent
/// records: `l = 0`; lookup lists `h:`, `c:`, `s:`: no `l`) is refused with
/// what to do: at connect when its newest bucket is one, at a commit when a
/// bucket of it appears later.
#[tokio::test]
async fn a_namespace_of_the_earlier_layout_is_refused_with_what_to_do() {
    for layout in [Some("1"), Some("0"), None] {
        refuses_a_namespace_of_layout(layout).await;
    }
}

async fn refuses_a_namespace_of_layout(layout: Option<&str>) {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let t = now_ms();
    let idx = connect(&server.url(), "old").await;
    let label = idx_label(&idx, t);
    let k = idx.keys().clone();
    // A bucket as an earlier layout wrote it: counter, shape, retention,
    // and its layout, if it named one.
    let write_old_bucket = |conn: &mut redis::Connection| {
        let _: () = redis::cmd("ZADD")
            .arg(k.buckets())
            .arg(idx.bucket_start(t))
            .arg(&label)
            .query(conn)
            .unwrap();
        let _: () = redis::cmd("HSET")
            .arg(k.counter(&label))
            .arg("n")
            .arg(1)
            .arg("k")
            .arg(12)
            .arg("r")
            .arg(72 * 3_600_000)
            .query(conn)
            .unwrap();
        if let Some(l) = layout {
            let _: () = redis::cmd("HSET")
                .arg(k.counter(&label))
                .arg("l")
                .arg(l)
                .query(conn)
                .unwrap();
        }
    };
    write_old_bucket(&mut conn);
    let said = |err: IndexError| match err {
        IndexError::Config(msg) => {
            assert!(
                msg.contains(&k.counter(&label))
                    && msg.contains("new namespace")
                    && msg.contains("expire"),
                "{msg}"
            );
        }
        other => panic!("expected a configuration error, got {other:?}"),
    };
    // Connected before the bucket appeared: the commit refuses.
    said(
        idx.check_and_insert(&entry("a", t, fp(S, 1, &sketch(1, 12))))
            .await
            .unwrap_err(),
    );
    // A process starting now is refused at connect.
    said(
        RedisIndex::connect(&server.url(), "old", config(), RedisIndexOptions::default())
            .await
            .unwrap_err(),
    );
    // Nothing was written by the refused commit.
    let n: u64 = redis::cmd("HGET")
        .arg(k.counter(&label))
        .arg("n")
        .query(&mut conn)
        .unwrap();
    assert_eq!(n, 1);
}

/// A process' own deletion reaches its next check at once, even while a
/// catch-up of its view that began before the delete is under way. Such a
/// catch-up may have read the deletion log before the delete: it must neither
/// make the copy count as fresh when it ends, nor serve a check that waited for
/// it. Another process keeps storing batches of unrelated articles, so that
/// every catch-up has handles to fetch and is under way most of the time; each round
/// stores an article, deletes it and checks a near-duplicate of it, which must
/// be kept (its only near neighbour is gone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_own_delete_is_seen_at_once_while_a_catch_up_is_under_way() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    let server = RedisServer::start();
    let open = || async {
        RedisIndex::connect(
            &server.url(),
            "owndel",
            config(),
            RedisIndexOptions::default(),
        )
        .await
        .expect("connect to the test redis-server")
    };
    let (idx, other) = (open().await, open().await);
    let t = now_ms();
    // Random SimHashes (splitmix64): no two of them within distance 3.
    let simhash = |x: u64| {
        let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let batch: Vec<_> = (n..n + 200)
                    .map(|i| entry(&format!("load-{i}"), t, fp(simhash(i), i, &[])))
                    .collect();
                other.preload(&batch).await.unwrap();
                n += 200;
            }
            n
        })
    };
    const ROUNDS: u64 = 300;
    let mut wrong = Vec::new();
    for round in 0..ROUNDS {
        let s = simhash(1 << 40 | round);
        let gone = entry(&format!("gone-{round}"), t, fp(s, 1 << 40 | round, &[]));
        assert_eq!(
            idx.check_and_insert(&gone).await.unwrap().verdict,
            Verdict::UNIQUE
        );
        assert!(idx.delete(&gone.id).await.unwrap().found);
        let copy = entry(&format!("copy-{round}"), t, fp(s ^ 1, 2 << 40 | round, &[]));
        let verdict = idx.check_and_insert(&copy).await.unwrap().verdict;
        if verdict.is_duplicate() {
            wrong.push((round, verdict));
        }
    }
    stop.store(true, Ordering::Relaxed);
    let loaded = load.await.unwrap();
    assert!(
        wrong.is_empty(),
        "{} of {ROUNDS} checks right after an own delete were linked to the deleted \
         article ({loaded} articles stored meanwhile by another process): {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(3)]
    );
}

/// `processes`: indexes connected (each one process' worth of connections).
async fn race_near_duplicate_groups(options: RedisIndexOptions, processes: usize) {
    let server = RedisServer::start();
    let mut indexes = Vec::new();
    for _ in 0..processes {
        indexes.push(
            RedisIndex::connect(&server.url(), "race", config(), options.clone())
                .await
                .expect("connect to the test redis-server"),
        );
    }
    let t = now_ms();
    let mut seed = 0x1234_5678_u64;
    let mut next = move || {
        // splitmix64
        seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    const GROUPS: u64 = 25;
    const COPIES: u64 = 6;
    for round in 0..3u64 {
        let mut tasks = Vec::new();
        let mut order: Vec<(u64, u64)> = (0..GROUPS)
            .flat_map(|g| (0..COPIES).map(move |k| (g, k)))
            .collect();
        // Shuffle so copies of a group are spread over connections and time.
        for i in (1..order.len()).rev() {
            order.swap(i, (next() % (i as u64 + 1)) as usize);
        }
        let bases: Vec<u64> = (0..GROUPS).map(|_| next()).collect();
        for (n, (g, k)) in order.into_iter().enumerate() {
            let base = bases[g as usize];
            let simhash = match k {
                // 12 bits away from the others' base: found only through the sketch.
                5 => base ^ 0x0007_0007_0007_0007,
                k => base ^ (1 << (k * 9)),
            };
            // Copies 0-2 are byte-identical in content.
            let content = if k < 3 { g + round * 1000 } else { next() };
            let e = entry(
                &format!("r{round}-g{g}-c{k}"),
                t + (next() % 1000) as i64,
                fp(simhash, content, &sketch(round * 1000 + g + 1, 12)),
            );
            let idx = indexes[n % indexes.len()].clone();
            tasks.push(tokio::spawn(async move {
                let out = idx.check_and_insert(&e).await;
                (g, e.id, out)
            }));
        }
        let mut uniques: HashMap<u64, Vec<String>> = HashMap::new();
        let mut dups: Vec<(u64, String)> = Vec::new();
        for task in tasks {
            let (g, id, out) = task.await.unwrap();
            let out = out.unwrap_or_else(|e| panic!("{id}: {e}"));
            assert!(!out.replayed, "{id} replayed");
            match out.verdict {
                Verdict::Unique { .. } => uniques.entry(g).or_default().push(id),
                Verdict::Duplicate(d) => dups.push((g, d.dup_of)),
            }
        }
        for g in 0..GROUPS {
            let kept = uniques.get(&g).cloned().unwrap_or_default();
            assert_eq!(kept.len(), 1, "round {round}, group {g} kept {kept:?}");
        }
        for (g, root) in dups {
            assert_eq!(uniques[&g][0], root, "round {round}, group {g}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_copies_of_one_id_insert_it_once() {
    race_copies_of_one_id(RedisIndexOptions::default()).await;
}

/// Versions of one id that share nothing (no block, content or sketch hash):
/// only the commit's id check keeps the second out.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_unrelated_versions_of_one_id_insert_it_once() {
    {
        let options = RedisIndexOptions::default();
        let server = RedisServer::start();
        let mut indexes = Vec::new();
        for _ in 0..3 {
            indexes.push(
                RedisIndex::connect(&server.url(), "versions", config(), options.clone())
                    .await
                    .expect("connect to the test redis-server"),
            );
        }
        let t = now_ms();
        for round in 0..5u64 {
            let tasks: Vec<_> = (0..12u64)
                .map(|i| {
                    let idx = indexes[i as usize % 3].clone();
                    // Each version its own SimHash (random: two share a
                    // 16-bit block about once in 4,000 pairs), content and
                    // sketch.
                    let mut z = (round * 1000 + i + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                    let simhash = z ^ (z >> 31);
                    let e = entry(
                        &format!("v-{round}"),
                        t,
                        fp(simhash, 1000 * round + i, &sketch(100 * round + i + 1, 12)),
                    );
                    tokio::spawn(async move { idx.check_and_insert(&e).await.unwrap() })
                })
                .collect();
            let mut fresh = 0;
            for task in tasks {
                let out = task.await.unwrap();
                fresh += usize::from(!out.replayed);
                assert_eq!(out.verdict, Verdict::UNIQUE, "round {round}");
            }
            assert_eq!(fresh, 1, "round {round}");
        }
    }
}

async fn race_copies_of_one_id(options: RedisIndexOptions) {
    let server = RedisServer::start();
    let mut indexes = Vec::new();
    for _ in 0..3 {
        indexes.push(
            RedisIndex::connect(&server.url(), "sameid", config(), options.clone())
                .await
                .expect("connect to the test redis-server"),
        );
    }
    let t = now_ms();
    for round in 0..5 {
        let e = entry(
            &format!("same-{round}"),
            t,
            fp(S ^ round, round, &sketch(round, 12)),
        );
        let tasks: Vec<_> = (0..12)
            .map(|i| {
                let idx = indexes[i % 3].clone();
                let e = e.clone();
                tokio::spawn(async move { idx.check_and_insert(&e).await.unwrap() })
            })
            .collect();
        let mut fresh = 0;
        let mut verdicts = Vec::new();
        for task in tasks {
            let out = task.await.unwrap();
            fresh += usize::from(!out.replayed);
            verdicts.push(out.verdict);
        }
        // Replays return the stored verdict: all copies agree.
        assert!(verdicts.iter().all(|v| *v == verdicts[0]), "{verdicts:?}");
        assert_eq!(verdicts[0].is_duplicate(), round > 0);
        assert_eq!(fresh, 1, "round {round}");
    }
    // One stored article per id.
    let mut conn = server.connection();
    let label = idx_label(&indexes[0], t);
    let id_hashes: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}i:{label}:*", indexes[0].keys().prefix()))
        .query(&mut conn)
        .unwrap();
    let mut n = 0;
    for key in id_hashes {
        let ids: Vec<String> = redis::cmd("HKEYS").arg(key).query(&mut conn).unwrap();
        // "" marks the hash's creation (lua/prelude.lua, set_field).
        n += ids.iter().filter(|id| !id.is_empty()).count();
    }
    assert_eq!(n, 5);
    let handles: u64 = redis::cmd("HGET")
        .arg(indexes[0].keys().counter(&label))
        .arg("n")
        .query(&mut conn)
        .unwrap();
    assert_eq!(handles, 5, "one handle per stored article");
}

/// Copies with one SimHash racing where that SimHash is already a block set
/// member (a deleted article's): adding them does not grow the block sets, so
/// only the packed fingerprints inserted since tell a commit someone got there
/// first.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_copies_of_a_known_simhash_keep_one() {
    let server = RedisServer::start();
    let mut indexes = Vec::new();
    for _ in 0..4 {
        indexes.push(connect(&server.url(), "samesim").await);
    }
    let t = now_ms();
    for round in 0..5u64 {
        let simhash = S.rotate_left(round as u32 * 7);
        let gone = entry(&format!("gone-{round}"), t, fp(simhash, 1_000 + round, &[]));
        indexes[0].check_and_insert(&gone).await.unwrap();
        assert!(indexes[0].delete(&gone.id).await.unwrap().found);
        let tasks: Vec<_> = (0..8u64)
            .map(|k| {
                let idx = indexes[k as usize % 4].clone();
                // Same SimHash, different content and no sketch: only the
                // SimHash signal links them.
                let e = entry(
                    &format!("same-{round}-{k}"),
                    t + k as i64,
                    fp(simhash, 10_000 * (round + 1) + k, &[]),
                );
                tokio::spawn(async move { idx.check_and_insert(&e).await.unwrap() })
            })
            .collect();
        let mut kept = 0;
        for task in tasks {
            kept += usize::from(!task.await.unwrap().verdict.is_duplicate());
        }
        assert_eq!(kept, 1, "round {round}");
    }
}

fn idx_label(idx: &RedisIndex, t: i64) -> String {
    simdedup::keys::bucket_label(idx.bucket_start(t))
}

/// `simdedup inspect ID` against `server` with `env`: (success, stdout,
/// stderr). Its Redis index is connected as a worker's is.
fn inspect(server: &RedisServer, id: &str, env: &[(&str, &str)]) -> (bool, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_simdedup"))
        .args([
            "inspect",
            id,
            "--namespace",
            "m",
            "--redis-url",
            &server.url(),
        ])
        .env_remove("SIMDEDUP_CONFIG")
        .env("SIMDEDUP_LOG", "warn")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

/// Under `allkeys-*` the index refuses to start, saying how to accept the
/// risk; accepted (`SIMDEDUP_ALLOW_EVICTION=true`, the setting the message
/// names) it starts with a warning. Under `volatile-*` it starts with a
/// warning. Run as the tools run, their log checked.
#[test]
fn refuses_allkeys_eviction_unless_allowed() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"]);
    let (ok, _, stderr) = inspect(&server, "a", &[]);
    assert!(!ok, "{stderr}");
    assert!(
        stderr.contains("maxmemory-policy is allkeys-lru")
            && stderr.contains("CONFIG SET maxmemory-policy noeviction")
            && stderr.contains("SIMDEDUP_ALLOW_EVICTION=true"),
        "{stderr}"
    );
    // Past the check: `inspect` reads the index and finds no `a` (exit 1,
    // nothing on standard output).
    let (_, stdout, stderr) = inspect(&server, "a", &[("SIMDEDUP_ALLOW_EVICTION", "true")]);
    assert!(stderr.contains("a is not in the index"), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.contains("WARN") && stderr.contains("may evict index keys"),
        "{stderr}"
    );

    let volatile = RedisServer::start_with(&["--maxmemory-policy", "volatile-lru"]);
    let (_, _, stderr) = inspect(&volatile, "a", &[]);
    assert!(stderr.contains("a is not in the index"), "{stderr}");
    assert!(
        stderr.contains("WARN") && stderr.contains("maxmemory-policy can evict keys with a TTL"),
        "{stderr}"
    );
    // noeviction: no warning. An id the index does not hold is shown as
    // such; an embedded index cannot be inspected from outside its worker.
    let quiet = RedisServer::start();
    let (ok, stdout, stderr) = inspect(&quiet, "nobody", &[]);
    assert!(!ok && !stderr.contains("WARN"), "{stderr}");
    assert!(stderr.contains("nobody is not in the index"), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    let (ok, _, stderr) = inspect(&quiet, "a", &[("SIMDEDUP_INDEX", "embedded")]);
    assert!(!ok, "{stderr}");
    assert!(
        stderr.contains("an embedded index lives only inside its worker"),
        "{stderr}"
    );
}

#[tokio::test]
async fn refuses_a_namespace_written_with_another_bucket_length() {
    let server = RedisServer::start();
    let hours = |h: u64| RedisIndexOptions {
        bucket_ms: Some(h * 3_600_000),
        ..Default::default()
    };
    // A namespace without buckets takes any bucket length.
    let idx = RedisIndex::connect(&server.url(), "b", config(), hours(24))
        .await
        .unwrap();
    idx.check_and_insert(&entry("a", now_ms(), fp(S, 1, &[])))
        .await
        .unwrap();
    // Once a bucket exists, a process configured for 48 h buckets is refused
    // (its buckets would overlap the 24 h ones and miss duplicates).
    let err = RedisIndex::connect(&server.url(), "b", config(), hours(48))
        .await
        .unwrap_err();
    match &err {
        IndexError::Config(msg) => {
            assert!(msg.contains("72 h") && msg.contains("96 h"), "{msg}");
            assert!(msg.contains("bucket_hours"), "{msg}");
        }
        other => panic!("expected a Config error, got {other:?}"),
    }
    // So is one with another window.
    let mut wide = config();
    wide.window_ms = 72 * 3_600_000;
    assert!(matches!(
        RedisIndex::connect(&server.url(), "b", wide, hours(24)).await,
        Err(IndexError::Config(_))
    ));
    // The same settings connect; another namespace is independent.
    assert!(RedisIndex::connect(&server.url(), "b", config(), hours(24))
        .await
        .is_ok());
    assert!(
        RedisIndex::connect(&server.url(), "other", config(), hours(48))
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn works_when_config_get_is_disabled() {
    // Managed Redis often hides CONFIG; the check must then warn, not fail.
    let server = RedisServer::start_with(&["--rename-command", "CONFIG", "\"\""]);
    let mut c = server.connection();
    assert!(redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query::<redis::Value>(&mut c)
        .is_err());
    let idx = connect(&server.url(), "noconf").await;
    assert!(idx
        .check_and_insert(&entry("a", now_ms(), fp(S, 1, &[])))
        .await
        .is_ok());
}

/// A real 3-master cluster: the whole conformance suite passes on it, and
/// namespaces whose hash tags map to different nodes are stored on those nodes.
#[tokio::test]
async fn three_master_cluster() {
    let cluster = RedisCluster::start(3);
    // One namespace per node.
    let mut chosen: Vec<(String, u16)> = Vec::new();
    for i in 0..200 {
        let ns = format!("ns{i}");
        let port = cluster.node_for(&format!("simdedup:{{{ns}}}:buckets")).port;
        if chosen.iter().all(|(_, p)| *p != port) {
            chosen.push((ns, port));
        }
        if chosen.len() == 3 {
            break;
        }
    }
    assert_eq!(chosen.len(), 3);
    let t = now_ms();
    for (ns, _) in &chosen {
        let idx = connect(&cluster.url(), ns).await;
        assert!(format!("{idx:?}").contains("cluster: true"));
        idx.check_and_insert(&entry("a", t, fp(S, 1, &sketch(1, 12))))
            .await
            .unwrap();
        let out = idx
            .check_and_insert(&entry("b", t, fp(S ^ 1, 2, &[])))
            .await
            .unwrap();
        assert_eq!(out.verdict.duplicate().unwrap().dup_of, "a");
        assert!(
            idx.check_and_insert(&entry("b", t, fp(S, 1, &[])))
                .await
                .unwrap()
                .replayed
        );
        assert_eq!(
            idx.cluster("a").await.unwrap().unwrap().duplicates,
            vec!["b"]
        );
    }
    for node in &cluster.nodes {
        let mut c = node.connection();
        let keys: Vec<String> = redis::cmd("KEYS").arg("simdedup:*").query(&mut c).unwrap();
        let (ns, _) = chosen.iter().find(|(_, p)| *p == node.port).unwrap();
        assert!(!keys.is_empty(), "node {} holds nothing", node.port);
        let tag = format!("{{{ns}}}");
        assert!(
            keys.iter().all(|k| k.contains(&tag)),
            "node {} holds {keys:?}",
            node.port
        );
    }
    // The behavioural suite, each case in a namespace of its own.
    macro_rules! on_cluster {
        ($case:ident) => {
            let idx = connect(&cluster.url(), concat!("c-", stringify!($case))).await;
            conformance::$case(&idx).await;
        };
    }
    conformance_cases!(on_cluster);
}

/// The worker's ACL documented in docs/redis-keys.md ("ACL per role"), read
/// from the document itself, is enough for everything the index does:
/// checks (new bucket, SimHash and sentence duplicates, replays, a root's
/// links beyond its field), query, get, cluster, delete. A script calling a
/// command the document does not list fails here.
#[tokio::test]
async fn the_documented_worker_acl_is_enough_for_the_index() {
    let server = RedisServer::start();
    let url = support::documented_acl_user(&server, "simdedup-worker");
    let idx = RedisIndex::connect(&url, "news", config(), RedisIndexOptions::default())
        .await
        .expect("connect as the documented ACL user");
    exercise_the_index(&idx).await;

    // And the user can touch nothing outside its namespace.
    let mut other = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let denied: redis::RedisResult<Option<String>> = redis::cmd("GET")
        .arg("simdedup:{other}:x")
        .query(&mut other);
    assert!(denied.is_err(), "GET outside the namespace must be refused");
    // Nor read the server's settings: `CONFIG GET` shows passwords in clear
    // (the index only warns when it cannot read the eviction policy).
    let config: redis::RedisResult<Vec<String>> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("requirepass")
        .query(&mut other);
    assert!(
        config.is_err(),
        "the documented ACL must not grant CONFIG GET: {config:?}"
    );
}

/// Every kind of index call, as the documented ACL user.
async fn exercise_the_index(idx: &RedisIndex) {
    let t = now_ms();
    let a = entry("a", t, fp(S, 1, &sketch(1, 12)));
    let b = entry("b", t + 1, fp(S ^ 0b11, 2, &sketch(2, 12)));
    // 12 bits away, no block shared, the whole sketch shared: found through it.
    let c = entry("c", t + 2, fp(S ^ 0x0007_0007_0007_0007, 3, &sketch(1, 12)));
    assert_eq!(
        idx.check_and_insert(&a).await.unwrap().verdict,
        Verdict::UNIQUE
    );
    for e in [&b, &c] {
        assert!(matches!(
            idx.check_and_insert(e).await.unwrap().verdict,
            Verdict::Duplicate(d) if d.dup_of == "a"
        ));
    }
    assert!(idx.check_and_insert(&b).await.unwrap().replayed);
    // Copies enough that the root's links outgrow its d: field.
    insert_copies(idx, "a", 6, t + 3, &fp(S, 1, &sketch(1, 12))).await;
    assert!(idx.query(&entry("q", t, fp(S, 9, &[]))).await.is_ok());
    assert!(idx.get("a").await.unwrap().is_some());
    assert_eq!(idx.cluster("b").await.unwrap().unwrap().duplicates.len(), 8);
    assert!(idx.delete("a").await.unwrap().found);
}

/// The namespace `ns` holds exactly the card's key families, and every key
/// expires within the window plus one bucket.
fn assert_card_keys_expire(conn: &mut redis::Connection, ns: &str, bucket_ms: i64) {
    let keys = keys_of(conn, ns);
    let prefix = format!("simdedup:{{{ns}}}:");
    let families: BTreeSet<&str> = keys
        .iter()
        .map(|k| k.trim_start_matches(&prefix).split(':').next().unwrap())
        .collect();
    assert_eq!(
        families,
        ["a", "b", "buckets", "d", "deleted", "history", "i", "n", "r"]
            .into_iter()
            .collect()
    );
    let limit = (bucket_ms + conformance::WINDOW) / 1000;
    for key in &keys {
        let ttl: i64 = redis::cmd("TTL").arg(key).query(conn).unwrap();
        assert!(
            ttl > 0 && ttl <= limit,
            "{key} has TTL {ttl}, limit {limit}"
        );
    }
}

/// The client's slot of a key is the server's (`CLUSTER KEYSLOT` of a node
/// started in cluster mode), hash tags and their edge cases included: a
/// wrong slot would send a namespace's commands to a node that refuses them.
#[test]
fn key_slots_are_the_servers() {
    let dir = std::env::temp_dir().join(format!("simdedup-keyslot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let nodes = dir.join("nodes.conf");
    let server = RedisServer::start_with(&[
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        nodes.to_str().unwrap(),
    ]);
    let mut c = server.connection();
    for key in [
        "foo",
        "a{}b",
        "{}",
        "{a",
        "a}b{c}",
        "{{x}}",
        "",
        "x{}{y}",
        "{user1000}.following",
        "simdedup:{新闻}:in",
        "simdedup:{news}:a:2025010500:12",
    ] {
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut c)
            .unwrap();
        assert_eq!(simdedup::connect::key_slot(key.as_bytes()), slot, "{key:?}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// Check `n` copies of `story` (ids `{prefix}0…`), each a duplicate.
async fn insert_copies(
    idx: &RedisIndex,
    prefix: &str,
    n: usize,
    t: i64,
    story: &simdedup::fingerprint::Fingerprint,
) {
    for i in 0..n {
        let copy = entry(&format!("{prefix}{i}"), t, story.clone());
        let out = idx.check_and_insert(&copy).await.unwrap();
        assert!(out.verdict.is_duplicate(), "{prefix}{i}: {out:?}");
    }
}
