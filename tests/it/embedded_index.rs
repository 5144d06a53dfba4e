//! The embedded index against the shared conformance suite.

use crate::conformance;

use simdedup::index::EmbeddedIndex;

macro_rules! run {
    ($case:ident) => {
        #[tokio::test]
        async fn $case() {
            let idx = EmbeddedIndex::new(conformance::config());
            conformance::$case(&idx).await;
        }
    };
}

conformance_cases!(run);
