package org.apache.kafka.common.utils;

/**
 * Where Kafka 4.3 kept AppInfoParser, for the connect-file and connect-mirror 4.3.1 plugins (4.4.0's
 * are not on the Maven Central the suite reaches): their version() calls it, and 4.4 moved the class
 * to org.apache.kafka.common.utils.internals. Kafka 4.4's own answer is passed on.
 */
public final class AppInfoParser {
    private AppInfoParser() {
    }

    public static String getVersion() {
        return org.apache.kafka.common.utils.internals.AppInfoParser.getVersion();
    }

    public static String getCommitId() {
        return org.apache.kafka.common.utils.internals.AppInfoParser.getCommitId();
    }
}
