package gateway.jvm;

import java.time.Duration;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * ShareConsume BOOTSTRAP TOPIC COUNT [key=value...]: joins the share group the settings' group.id names with
 * Kafka's own KafkaShareConsumer, reads COUNT records (each acknowledged as accepted), commits the
 * acknowledgements and prints each record as `partition offset value`. Gives up after a minute.
 */
public final class ShareConsume {
    public static void main(String[] args) {
        Properties props = Props.of(args[0], args, 3);
        int count = Integer.parseInt(args[2]);
        long deadline = System.currentTimeMillis() + 60_000;
        try (KafkaShareConsumer<String, String> consumer =
                new KafkaShareConsumer<>(props, new StringDeserializer(), new StringDeserializer())) {
            consumer.subscribe(List.of(args[1]));
            int seen = 0;
            while (seen < count) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    System.out.println(r.partition() + " " + r.offset() + " " + r.value());
                    seen++;
                }
                consumer.commitSync();
                Consume.giveUpAfter(deadline);
            }
        }
    }
}
