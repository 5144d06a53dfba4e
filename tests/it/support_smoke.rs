//! The test Redis helper itself: starts a private server and talks to it.
use crate::support;

#[test]
fn starts_a_private_redis_server() {
    let server = support::RedisServer::start();
    let mut conn = server.connection();
    let pong: String = redis::cmd("PING").query(&mut conn).unwrap();
    assert_eq!(pong, "PONG");
    assert_ne!(
        server.port, 6379,
        "must never use the machine's shared Redis"
    );
}
