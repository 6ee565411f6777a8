//! The admin endpoint's own metrics, written by its one thread.

super::metric_set! {
    /// What the admin endpoint refused.
    pub struct AdminStats {
        /// Mutating admin calls refused 401: no `Authorization: Bearer` header, or the wrong
        /// token.
        "routerd_admin_unauthorized_total" Counter { unauthorized }
    }
}
