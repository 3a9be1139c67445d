package gateway.jvm;

/**
 * Waits for what a user would see once a broker has applied a change: Kafka's broker learns of a
 * topic, its configs, new partitions, ACLs, quotas and SCRAM users from the metadata log a moment
 * after the controller answers the request that made them, so a describe sent at once may find the
 * state before it (the suite's Python scenarios await the same: tests/test_kafka_differential.py's
 * serving, configs_settled and acls_settled). The gateway answers once its change is in Redis, so
 * there the first look holds.
 */
final class Settled {
    private static final long TIMEOUT_NANOS = 30_000_000_000L;

    private Settled() {}

    interface Check {
        boolean holds() throws Exception;
    }

    /**
     * Until `check` holds, or 30 s have passed: then the scenario goes on, and what it reports next
     * shows the state that never came. A check that throws (an unknown topic) has not held yet.
     */
    static void until(Check check) throws InterruptedException {
        long deadline = System.nanoTime() + TIMEOUT_NANOS;
        while (System.nanoTime() < deadline) {
            try {
                if (check.holds()) {
                    return;
                }
            } catch (Exception e) {
                // not yet
            }
            Thread.sleep(20);
        }
    }
}
