package gateway.jvm;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * Consume BOOTSTRAP TOPIC COUNT [key=value...]: reads with Kafka's own consumer and prints each record as
 * `partition offset value`. With a group.id it subscribes, reads COUNT records, commits them and
 * prints `committed partition offset` for each partition of the topic; without one it reads every
 * partition from its beginning to the end offset it has when it starts (COUNT unused), or, with COUNT
 * written `@N`, from offset N of every partition: a read from a chosen point, as a seek makes it.
 * Gives up after a minute with exit code 1.
 */
public final class Consume {
    public static void main(String[] args) {
        Properties props = Props.of(args[0], args, 3);
        String topic = args[1];
        int count = args[2].startsWith("@") ? 0 : Integer.parseInt(args[2]);
        long deadline = System.currentTimeMillis() + 60_000;
        try (KafkaConsumer<String, String> consumer =
                new KafkaConsumer<>(props, new StringDeserializer(), new StringDeserializer())) {
            List<TopicPartition> partitions = new ArrayList<>();
            consumer.partitionsFor(topic).forEach(p -> partitions.add(new TopicPartition(topic, p.partition())));
            if (props.containsKey("group.id")) {
                consumer.subscribe(List.of(topic));
                int seen = 0;
                while (seen < count) {
                    seen += print(consumer.poll(Duration.ofMillis(200)));
                    giveUpAfter(deadline);
                }
                consumer.commitSync();
                Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(Set.copyOf(partitions));
                for (TopicPartition tp : partitions) {
                    OffsetAndMetadata om = committed.get(tp);
                    System.out.println("committed " + tp.partition() + " " + (om == null ? -1 : om.offset()));
                }
            } else {
                consumer.assign(partitions);
                if (args[2].startsWith("@")) {
                    long from = Long.parseLong(args[2].substring(1));
                    partitions.forEach(tp -> consumer.seek(tp, from));
                } else {
                    consumer.seekToBeginning(partitions);
                }
                Map<TopicPartition, Long> end = consumer.endOffsets(partitions);
                while (partitions.stream().anyMatch(tp -> consumer.position(tp) < end.get(tp))) {
                    print(consumer.poll(Duration.ofMillis(200)));
                    giveUpAfter(deadline);
                }
            }
        }
    }

    private static int print(Iterable<ConsumerRecord<String, String>> records) {
        int n = 0;
        for (ConsumerRecord<String, String> r : records) {
            System.out.println(r.partition() + " " + r.offset() + " " + r.value());
            n++;
        }
        return n;
    }

    static void giveUpAfter(long deadline) {
        if (System.currentTimeMillis() > deadline) {
            System.err.println("gave up waiting");
            System.exit(1);
        }
    }
}
