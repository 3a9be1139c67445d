package gateway.jvm;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.stream.Collectors;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.CloseOptions;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyQueryMetadata;
import org.apache.kafka.streams.StreamsMetadata;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Named;
import org.apache.kafka.streams.kstream.TimeWindows;

/**
 * StreamsApp BOOTSTRAP APP STATE_DIR [key=value...]: a stateful Kafka Streams application named APP
 * (its application.id, and the prefix of its topics) that runs until its stdin closes, then closes
 * and leaves its group. It reads APP-clicks (user to page) and APP-regions (user to region, a table)
 * and writes, every value a string:
 * APP-counts, clicks per user (groupByKey().count());
 * APP-windowed, the pages each user visited per 10-second window, in order (a windowed aggregate),
 * keyed `user@windowStart`;
 * APP-pages, clicks per page (a repartition through selectKey, then a count);
 * APP-joined, `region:count` per user (a KTable-KTable join of the counts with the regions).
 * It prints `state NEW` and each state it moves to after, `error CLASS: MESSAGE` for an exception
 * that stops a stream thread and each of its causes (which then shuts the client down), and `closed` at the end.
 * A stdin line `metadata` prints what Interactive Queries know (with `application.server` set): a
 * line `client HOST:PORT active=TOPIC-P,... standby=TOPIC-P,...` per client of
 * metadataForAllStreamsClients(), then `key USER HOST:PORT` for user-0 to user-5, the active
 * host queryMetadataForKey names for that user's count, then `metadata end`.
 */
public final class StreamsApp {
    public static void main(String[] args) throws Exception {
        String app = args[1];
        Properties props = Props.of(args[0], args, 3);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, app);
        props.put(StreamsConfig.STATE_DIR_CONFIG, args[2]);
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);

        KafkaStreams streams = new KafkaStreams(topology(app), props);
        CountDownLatch stopped = new CountDownLatch(1);
        System.out.println("state " + streams.state());
        streams.setStateListener((now, before) -> {
            System.out.println("state " + now);
            if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
                stopped.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(e -> {
            for (Throwable cause = e; cause != null; cause = cause.getCause()) {
                System.out.println("error " + cause.getClass().getName() + ": " + cause.getMessage());
            }
            return StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        streams.start();
        Thread stdin = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                for (String line; (line = in.readLine()) != null; ) {
                    if (line.equals("metadata")) {
                        printMetadata(streams);
                    }
                }
            } catch (Exception ignored) {
                // a closed stdin is the signal either way
            }
            stopped.countDown();
        });
        stdin.setDaemon(true);
        stdin.start();
        stopped.await();
        streams.close(CloseOptions.groupMembershipOperation(CloseOptions.GroupMembershipOperation.LEAVE_GROUP)
                .withTimeout(Duration.ofMinutes(1)));
        System.out.println("closed");
    }

    static void printMetadata(KafkaStreams streams) {
        List<String> out = new ArrayList<>();
        for (StreamsMetadata m : streams.metadataForAllStreamsClients()) {
            out.add("client " + m.host() + ":" + m.port() + " active=" + partitions(m.topicPartitions())
                    + " standby=" + partitions(m.standbyTopicPartitions()));
        }
        Collections.sort(out);
        for (int i = 0; i < 6; i++) {
            String user = "user-" + i;
            KeyQueryMetadata k = streams.queryMetadataForKey("counts", user, Serdes.String().serializer());
            out.add("key " + user + " " + k.activeHost().host() + ":" + k.activeHost().port());
        }
        out.add("metadata end");
        synchronized (System.out) {
            out.forEach(System.out::println);
        }
    }

    static String partitions(Set<TopicPartition> tps) {
        return tps.stream().map(TopicPartition::toString).sorted().collect(Collectors.joining(","));
    }

    static Topology topology(String app) {
        StreamsBuilder builder = new StreamsBuilder();
        KStream<String, String> clicks = builder.stream(app + "-clicks");
        KTable<String, Long> counts = clicks.groupByKey().count(Named.as("count-by-user"), Materialized.as("counts"));
        counts.toStream().mapValues(String::valueOf).to(app + "-counts");

        clicks.groupByKey()
                .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofSeconds(10), Duration.ofDays(1)))
                .aggregate(() -> "", (user, page, pages) -> pages.isEmpty() ? page : pages + "," + page,
                        Named.as("pages-per-window"), Materialized.as("windowed"))
                .toStream((window, pages) -> window.key() + "@" + window.window().start())
                .to(app + "-windowed");

        clicks.selectKey((user, page) -> page, Named.as("by-page"))
                .groupByKey()
                .count(Named.as("count-by-page"), Materialized.as("pages"))
                .toStream().mapValues(String::valueOf).to(app + "-pages");

        KTable<String, String> regions = builder.table(app + "-regions", Materialized.as("regions"));
        counts.join(regions, (n, region) -> region + ":" + n, Named.as("join-regions"), Materialized.as("joined"))
                .toStream().to(app + "-joined");
        return builder.build();
    }
}
