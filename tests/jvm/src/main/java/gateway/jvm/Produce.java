package gateway.jvm;

import java.time.Duration;
import java.util.Properties;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Produce BOOTSTRAP TOPIC PLAN [key=value...]: sends records with Kafka's own producer, each keyed by
 * its value (so the partition a record lands in is the same on every broker), and prints each
 * acknowledgement as `partition offset value`. PLAN is steps separated by commas: `send:N` sends N
 * records outside a transaction; `commit:N` and `abort:N` send N records in a transaction, then commit
 * or abort it (the settings must name a transactional.id) and print `commit` or `abort`; `open:N`, the
 * last step, sends N records in a transaction and leaves it open: the producer is closed at once,
 * which aborts nothing.
 */
public final class Produce {
    public static void main(String[] args) throws Exception {
        Properties props = Props.of(args[0], args, 3);
        boolean transactional = props.containsKey("transactional.id");
        int sent = 0;
        boolean open = false;
        KafkaProducer<String, String> producer =
                new KafkaProducer<>(props, new StringSerializer(), new StringSerializer());
        try {
            if (transactional) {
                producer.initTransactions();
            }
            for (String step : args[2].split(",")) {
                String[] kv = step.split(":");
                String action = kv[0];
                int n = Integer.parseInt(kv[1]);
                if (!action.equals("send")) {
                    producer.beginTransaction();
                }
                for (int i = 0; i < n; i++, sent++) {
                    String value = action + "-" + sent;
                    RecordMetadata md = producer.send(new ProducerRecord<>(args[1], value, value)).get();
                    System.out.println(md.partition() + " " + md.offset() + " " + value);
                }
                if (action.equals("commit")) {
                    producer.commitTransaction();
                } else if (action.equals("abort")) {
                    producer.abortTransaction();
                }
                if (!action.equals("send")) {
                    System.out.println(action);
                }
                open = action.equals("open");
            }
        } finally {
            producer.close(open ? Duration.ZERO : Duration.ofMinutes(1));
        }
    }
}
