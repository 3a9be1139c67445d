package gateway.jvm;

import java.util.List;
import java.util.Map;
import org.apache.kafka.common.metrics.KafkaMetric;
import org.apache.kafka.common.metrics.MetricsReporter;
import org.apache.kafka.server.telemetry.ClientTelemetryExporter;
import org.apache.kafka.server.telemetry.ClientTelemetryExporterProvider;
import org.apache.kafka.shaded.com.google.protobuf.InvalidProtocolBufferException;
import org.apache.kafka.shaded.io.opentelemetry.proto.metrics.v1.MetricsData;

/**
 * A broker metrics reporter that takes clients' telemetry (KIP-714) and decodes it, as the gateway's
 * export does. With it in `metric.reporters` Kafka serves GetTelemetrySubscriptions and PushTelemetry
 * (a default broker does not), and answers a push it cannot decode INVALID_RECORD: the reference the
 * gateway's telemetry answers are compared with.
 */
public class TelemetryExporter implements MetricsReporter, ClientTelemetryExporterProvider {
    @Override
    public void configure(Map<String, ?> configs) {}

    @Override
    public void init(List<KafkaMetric> metrics) {}

    @Override
    public void metricChange(KafkaMetric metric) {}

    @Override
    public void metricRemoval(KafkaMetric metric) {}

    @Override
    public void close() {}

    @Override
    public ClientTelemetryExporter clientTelemetryExporter() {
        return (context, payload) -> {
            try {
                MetricsData.parseFrom(payload.data());
            } catch (InvalidProtocolBufferException e) {
                throw new IllegalArgumentException("not OTLP MetricsData", e);
            }
        };
    }
}
