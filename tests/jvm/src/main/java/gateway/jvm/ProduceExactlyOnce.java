package gateway.jvm;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.OutOfOrderSequenceException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * ProduceExactlyOnce BOOTSTRAP TOPIC COUNT CHUNK [key=value...]: sends values m-00000 .. m-(COUNT-1),
 * each keyed by itself, CHUNK to a transaction, as the producer's javadoc says an application rides
 * out a broker going away: a transaction that fails with an abortable error is aborted and its chunk
 * sent again in the next one; a commit that times out is retried (its outcome is decided by then, and
 * the retry learns it); fencing, an out-of-order sequence and authorization stay fatal. Prints
 * `committed N` (records committed so far) after each commit and `aborted N` after each abort, so a
 * test can act mid-stream; the settings must name a transactional.id.
 */
public final class ProduceExactlyOnce {
    public static void main(String[] args) throws Exception {
        int count = Integer.parseInt(args[2]);
        int chunk = Integer.parseInt(args[3]);
        try (KafkaProducer<String, String> producer =
                new KafkaProducer<>(Props.of(args[0], args, 4), new StringSerializer(), new StringSerializer())) {
            producer.initTransactions();
            int done = 0;
            while (done < count) {
                int end = Math.min(done + chunk, count);
                try {
                    producer.beginTransaction();
                    List<Future<RecordMetadata>> sent = new ArrayList<>();
                    for (int i = done; i < end; i++) {
                        String value = String.format("m-%05d", i);
                        sent.add(producer.send(new ProducerRecord<>(args[1], value, value)));
                    }
                    for (Future<RecordMetadata> f : sent) {
                        get(f);
                    }
                    commit(producer);
                    done = end;
                    System.out.println("committed " + done);
                } catch (ProducerFencedException | OutOfOrderSequenceException | AuthorizationException e) {
                    throw e;
                } catch (KafkaException e) {
                    producer.abortTransaction();
                    System.out.println("aborted " + done);
                }
                System.out.flush();
            }
        }
    }

    private static void get(Future<RecordMetadata> f) throws InterruptedException {
        try {
            f.get();
        } catch (ExecutionException e) {
            throw e.getCause() instanceof KafkaException ke ? ke : new KafkaException(e.getCause());
        }
    }

    private static void commit(KafkaProducer<String, String> producer) {
        for (int attempt = 1; ; attempt++) {
            try {
                producer.commitTransaction();
                return;
            } catch (TimeoutException e) {
                if (attempt == 5) {
                    throw e;
                }
            }
        }
    }
}
