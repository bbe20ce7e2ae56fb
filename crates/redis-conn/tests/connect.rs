//! A Redis that cannot be had is a start-up error, said at once, not a
//! start-up that hangs.

use std::time::Duration;

use hmdp_redis::Endpoint;

#[tokio::test]
async fn cluster_nodes_nobody_answers_on_are_an_error_within_the_deadline() {
    // Port 1: nothing listens there, so every connection is refused.
    let endpoint = Endpoint::new("redis://127.0.0.1:6379", Some("127.0.0.1:1,127.0.0.1:2")).unwrap();
    // The connect deadline is 10 s; a hang would outlast any bound.
    let connected = tokio::time::timeout(Duration::from_secs(30), endpoint.connect(Duration::from_secs(2)))
        .await
        .expect("connecting to nodes nobody answers on hung");
    let err = connected.err().expect("connected to a cluster that does not exist");
    assert!(err.to_string().contains("refused") || err.to_string().contains("did not answer"), "{err}");
}
