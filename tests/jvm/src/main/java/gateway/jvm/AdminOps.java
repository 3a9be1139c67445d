package gateway.jvm;

import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.DescribeConfigsOptions;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * AdminOps BOOTSTRAP TOPIC [key=value...]: the Admin client's common methods, one after another, on a
 * new topic TOPIC (and a consumer group and ACLs of the same name), printing `what: result` a line;
 * a failure prints the exception's class and message.
 */
public final class AdminOps {
    private static final List<String> CONFIGS = List.of(
            "cleanup.policy", "flush.ms", "max.message.bytes", "retention.ms", "segment.jitter.ms", "segment.ms");

    public static void main(String[] args) throws Exception {
        String topic = args[1];
        TopicPartition p0 = new TopicPartition(topic, 0);
        ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        try (Admin admin = Admin.create(Props.of(args[0], args, 2))) {
            NewTopic newTopic = new NewTopic(topic, 2, (short) 1).configs(Map.of("retention.ms", "86400000"));
            report("create topic", () -> admin.createTopics(List.of(newTopic)).all().get());
            report("create it again", () -> admin.createTopics(List.of(newTopic)).all().get());
            Settled.until(() -> admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic)
                    .partitions().size() == 2);
            report("partitions", () -> partitions(admin, topic));
            report("configs", () -> configs(admin, resource));
            report("alter configs", () -> admin.incrementalAlterConfigs(Map.of(resource, List.of(
                    new AlterConfigOp(new ConfigEntry("max.message.bytes", "20000"), AlterConfigOp.OpType.SET),
                    new AlterConfigOp(new ConfigEntry("retention.ms", ""), AlterConfigOp.OpType.DELETE)))).all().get());
            Settled.until(() -> admin.describeConfigs(List.of(resource)).all().get().get(resource)
                    .get("max.message.bytes").value().equals("20000"));
            report("configs", () -> configs(admin, resource));

            long base = produceTen(args[0], p0);
            report("producers", () -> admin.describeProducers(List.of(p0)).partitionResult(p0).get()
                    .activeProducers().stream().map(s -> "epoch " + s.producerEpoch() + " last sequence "
                            + s.lastSequence() + " in a transaction " + s.currentTransactionStartOffset().isPresent())
                    .toList());
            Map<String, OffsetSpec> specs = new TreeMap<>(Map.of(
                    "earliest", OffsetSpec.earliest(), "latest", OffsetSpec.latest(),
                    "max timestamp", OffsetSpec.maxTimestamp(), "at 4500", OffsetSpec.forTimestamp(base + 4500),
                    "after the last", OffsetSpec.forTimestamp(base + 99_999)));
            specs.forEach((name, spec) -> report("offset " + name, () -> {
                var info = admin.listOffsets(Map.of(p0, spec)).partitionResult(p0).get();
                return info.offset() + " at " + (info.timestamp() < 0 ? -1 : info.timestamp() - base);
            }));
            report("delete records", () -> admin.deleteRecords(Map.of(p0, RecordsToDelete.beforeOffset(4)))
                    .lowWatermarks().get(p0).get().lowWatermark());
            report("offset earliest", () -> admin.listOffsets(Map.of(p0, OffsetSpec.earliest())).partitionResult(p0).get().offset());
            report("delete beyond the end", () -> admin.deleteRecords(Map.of(p0, RecordsToDelete.beforeOffset(99)))
                    .lowWatermarks().get(p0).get().lowWatermark());
            report("create partitions", () -> admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(3))).all().get());
            Settled.until(() -> admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic)
                    .partitions().size() == 3);
            report("partitions", () -> partitions(admin, topic));
            report("as many partitions", () -> admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(3))).all().get());
            report("fewer partitions", () -> admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(1))).all().get());

            String group = topic;
            report("alter group offsets", () -> admin.alterConsumerGroupOffsets(
                    group, Map.of(p0, new OffsetAndMetadata(5, "five"))).all().get());
            report("group offsets", () -> admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get());
            report("describe group", () -> {
                ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
                return d.groupState() + " " + d.type() + " members " + d.members().size();
            });
            report("listed group", () -> admin.listGroups().all().get().stream()
                    .filter(g -> g.groupId().equals(group)).map(g -> g.type() + " " + g.groupState()).toList());
            report("delete group offsets", () -> admin.deleteConsumerGroupOffsets(group, Set.of(p0)).all().get());
            report("group offsets", () -> admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get());
            report("delete group", () -> admin.deleteConsumerGroups(List.of(group)).all().get());
            report("delete it again", () -> admin.deleteConsumerGroups(List.of(group)).all().get());

            AclBinding acl = new AclBinding(new ResourcePattern(ResourceType.TOPIC, topic, PatternType.LITERAL),
                    new AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW));
            AclBindingFilter filter = new AclBindingFilter(
                    new ResourcePatternFilter(ResourceType.TOPIC, topic, PatternType.ANY), AccessControlEntryFilter.ANY);
            report("create acls", () -> admin.createAcls(List.of(acl)).all().get());
            Settled.until(() -> admin.describeAcls(filter).values().get().size() == 1);
            report("describe acls", () -> admin.describeAcls(filter).values().get());
            report("delete acls", () -> admin.deleteAcls(List.of(filter)).all().get());
            Settled.until(() -> admin.describeAcls(filter).values().get().isEmpty());
            report("describe acls", () -> admin.describeAcls(filter).values().get());

            String missing = topic + "-missing";
            ConfigResource missingTopic = new ConfigResource(ConfigResource.Type.TOPIC, missing);
            report("bad topic name", () -> admin.createTopics(List.of(new NewTopic("bad/name", 1, (short) 1))).all().get());
            report("topic name ..", () -> admin.createTopics(List.of(new NewTopic("..", 1, (short) 1))).all().get());
            report("long topic name", () -> admin.createTopics(List.of(new NewTopic("t".repeat(250), 1, (short) 1)))
                    .all().get());
            report("bad config", () -> admin.createTopics(List.of(new NewTopic(missing, 1, (short) 1)
                    .configs(Map.of("retention.ms", "soon")))).all().get());
            report("unknown config", () -> admin.createTopics(List.of(new NewTopic(missing, 1, (short) 1)
                    .configs(Map.of("no.such.config", "1")))).all().get());
            report("no partitions", () -> admin.createTopics(List.of(new NewTopic(missing, 0, (short) 1))).all().get());
            report("describe a missing topic", () -> partitions(admin, missing));
            report("configs of a missing topic", () -> configs(admin, missingTopic));
            report("alter a missing topic", () -> admin.incrementalAlterConfigs(Map.of(missingTopic, List.of(
                    new AlterConfigOp(new ConfigEntry("retention.ms", "1"), AlterConfigOp.OpType.SET)))).all().get());
            report("alter to a bad value", () -> admin.incrementalAlterConfigs(Map.of(resource, List.of(
                    new AlterConfigOp(new ConfigEntry("retention.ms", "soon"), AlterConfigOp.OpType.SET)))).all().get());
            report("delete a missing topic", () -> admin.deleteTopics(List.of(missing)).all().get());
            report("describe a missing group", () -> {
                ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(missing)).all().get().get(missing);
                return d.groupState() + " " + d.type() + " members " + d.members().size();
            });
            report("offsets of a missing group", () -> admin.listConsumerGroupOffsets(missing)
                    .partitionsToOffsetAndMetadata().get());
            report("cluster", () -> {
                var cluster = admin.describeCluster();
                return cluster.nodes().get().size() + " nodes, controller " + (cluster.controller().get() != null);
            });

            report("delete topic", () -> admin.deleteTopics(List.of(topic)).all().get());
            Settled.until(() -> !admin.listTopics().names().get().contains(topic));
            report("partitions", () -> partitions(admin, topic));
        }
    }

    interface Call {
        Object run() throws Exception;
    }

    private static void report(String what, Call call) {
        String result;
        try {
            Object value = call.run();
            result = value == null ? "ok" : value.toString();
        } catch (ExecutionException e) {
            result = e.getCause().getClass().getSimpleName() + ": " + e.getCause().getMessage();
            e.printStackTrace();
        } catch (Exception e) {
            result = e.getClass().getSimpleName();
            e.printStackTrace();
        }
        System.out.println(what + ": " + result);
    }

    private static String partitions(Admin admin, String topic) throws Exception {
        return admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic).partitions().stream()
                .map(p -> p.partition() + " replicas " + p.replicas().size() + " isr " + p.isr().size())
                .collect(Collectors.joining(", "));
    }

    /** The configs the scenario touches: value, source, and each synonym's source. */
    private static String configs(Admin admin, ConfigResource resource) throws Exception {
        Config config = admin.describeConfigs(List.of(resource), new DescribeConfigsOptions().includeSynonyms(true))
                .all().get().get(resource);
        return CONFIGS.stream().map(config::get)
                .map(e -> e.name() + "=" + e.value() + " " + e.source() + " " + e.synonyms().stream()
                        .map(s -> s.name() + "/" + s.source()).toList())
                .collect(Collectors.joining("; "));
    }

    /**
     * Ten records to one partition, timestamped base + 1000 to base + 10000, where base is a minute
     * ago (recent enough for no retention to remove them); returns base.
     */
    private static long produceTen(String bootstrap, TopicPartition tp) throws Exception {
        long base = System.currentTimeMillis() - 60_000;
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(
                Props.of(bootstrap, new String[0], 0), new StringSerializer(), new StringSerializer())) {
            for (int i = 1; i <= 10; i++) {
                producer.send(new ProducerRecord<>(tp.topic(), tp.partition(), base + i * 1000L, null, "r" + i)).get();
            }
        }
        return base;
    }
}
