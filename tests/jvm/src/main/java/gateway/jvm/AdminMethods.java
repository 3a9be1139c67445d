package gateway.jvm;

import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.time.Duration;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.AbortTransactionSpec;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ElectLeadersResult;
import org.apache.kafka.clients.admin.FeatureUpdate;
import org.apache.kafka.clients.admin.ListConfigResourcesOptions;
import org.apache.kafka.clients.admin.ListConsumerGroupOffsetsSpec;
import org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec;
import org.apache.kafka.clients.admin.ListStreamsGroupOffsetsSpec;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RaftVoterEndpoint;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.RemoveMembersFromConsumerGroupOptions;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionReplica;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.metrics.KafkaMetric;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.apache.kafka.common.quota.ClientQuotaFilterComponent;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;

/**
 * AdminMethods BOOTSTRAP NAME [key=value...]: every method of Kafka 4.4's Admin interface, once
 * each, in the interface's alphabetical order, on a new topic NAME (and groups, ACLs, a user and a
 * transactional id of that name). Prints `method: ok SUMMARY` or `method: ExceptionClass: message`
 * a line; a summary holds what both a Kafka broker and the gateway should answer alike (no node
 * ids, topic ids, cluster ids or times).
 */
public final class AdminMethods {
    private static final Set<String> REPORTED = new HashSet<>();

    public static void main(String[] args) throws Exception {
        String name = args[1];
        TopicPartition p0 = new TopicPartition(name, 0);
        // abortTransaction's marker on its own topic, so that no other method sees its offset
        TopicPartition markers = new TopicPartition(name + "-markers", 0);
        ConfigResource topicConfigs = new ConfigResource(ConfigResource.Type.TOPIC, name);
        byte[] noToken = new byte[] {1, 2, 3};
        try (Admin admin = Admin.create(Props.of(args[0], args, 2))) {
            int node = admin.describeCluster().nodes().get().iterator().next().id();
            admin.createTopics(List.of(new NewTopic(name, 1, (short) 1), new NewTopic(markers.topic(), 1, (short) 1)))
                    .all().get();
            Settled.until(() -> admin.describeTopics(List.of(name, markers.topic())).allTopicNames().get().size() == 2);
            // groups for the describe methods, and others for the delete methods, which come first
            admin.alterConsumerGroupOffsets(name, Map.of(p0, new OffsetAndMetadata(0))).all().get();
            admin.alterConsumerGroupOffsets(name + "-gone", Map.of(p0, new OffsetAndMetadata(0))).all().get();
            admin.alterShareGroupOffsets(name + "-share-gone", Map.of(p0, 0L)).all().get();
            admin.fenceProducers(List.of(name + "-txn")).all().get();  // a transactional id to describe
            KafkaMetric metric = (KafkaMetric) admin.metrics().values().iterator().next();

            report("abortTransaction", () -> {
                admin.abortTransaction(new AbortTransactionSpec(markers, 4242, (short) 0, 0)).all().get();
                return "end offset " + admin.listOffsets(Map.of(markers, OffsetSpec.latest())).partitionResult(markers)
                        .get().offset();
            });
            report("addRaftVoter", () -> admin.addRaftVoter(9, Uuid.randomUuid(),
                    Set.of(new RaftVoterEndpoint("CONTROLLER", "127.0.0.1", 1))).all().get());
            report("alterClientQuotas", () -> admin.alterClientQuotas(List.of(new ClientQuotaAlteration(
                    new ClientQuotaEntity(Map.of(ClientQuotaEntity.CLIENT_ID, name)),
                    List.of(new ClientQuotaAlteration.Op("producer_byte_rate", 1024.0))))).all().get());
            Settled.until(() -> !admin.describeClientQuotas(ClientQuotaFilter.containsOnly(List.of(
                    ClientQuotaFilterComponent.ofEntity(ClientQuotaEntity.CLIENT_ID, name)))).entities().get().isEmpty());
            report("alterConsumerGroupOffsets", () -> admin.alterConsumerGroupOffsets(
                    name, Map.of(p0, new OffsetAndMetadata(0, "zero"))).all().get());
            report("alterPartitionReassignments", () -> admin.alterPartitionReassignments(
                    Map.of(p0, Optional.of(new NewPartitionReassignment(List.of(node))))).all().get());
            report("alterReplicaLogDirs", () -> admin.alterReplicaLogDirs(
                    Map.of(new TopicPartitionReplica(name, 0, node), "/no/such/dir")).all().get());
            report("alterShareGroupOffsets", () -> admin.alterShareGroupOffsets(
                    name + "-share", Map.of(p0, 0L)).all().get());
            report("alterStreamsGroupOffsets", () -> admin.alterStreamsGroupOffsets(
                    name + "-streams", Map.of(p0, new OffsetAndMetadata(0))).all().get());
            report("alterUserScramCredentials", () -> admin.alterUserScramCredentials(List.of(
                    new UserScramCredentialUpsertion(name, new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                            "secret"))).all().get());
            Settled.until(() -> admin.describeUserScramCredentials(List.of(name)).all().get().size() == 1);
            report("clientInstanceId", () -> admin.clientInstanceId(Duration.ofSeconds(5)) != null);
            report("clientInstanceId, metrics pushed", () -> {
                Properties props = Props.of(args[0], args, 2);
                props.put("enable.metrics.push", "true");
                try (Admin pushing = Admin.create(props)) {
                    return pushing.clientInstanceId(Duration.ofSeconds(5)) != null;
                }
            });
            AclBinding acl = new AclBinding(new ResourcePattern(ResourceType.TOPIC, name, PatternType.LITERAL),
                    new AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW));
            AclBindingFilter acls = new AclBindingFilter(
                    new ResourcePatternFilter(ResourceType.TOPIC, name, PatternType.ANY), AccessControlEntryFilter.ANY);
            report("createAcls", () -> admin.createAcls(List.of(acl)).all().get());
            report("createDelegationToken", () -> admin.createDelegationToken().delegationToken().get() != null);
            report("createPartitions", () -> admin.createPartitions(Map.of(name, NewPartitions.increaseTo(2))).all().get());
            Settled.until(() -> admin.describeTopics(List.of(name)).allTopicNames().get().get(name)
                    .partitions().size() == 2);
            report("createTopics", () -> admin.createTopics(List.of(new NewTopic(name + "-new", 1, (short) 1)))
                    .all().get());
            report("deleteAcls", () -> admin.deleteAcls(List.of(acls)).all().get().size());
            Settled.until(() -> admin.describeAcls(acls).values().get().isEmpty());
            report("deleteConsumerGroupOffsets", () -> admin.deleteConsumerGroupOffsets(name + "-gone", Set.of(p0)).all().get());
            report("deleteConsumerGroups", () -> admin.deleteConsumerGroups(List.of(name + "-gone")).all().get());
            report("deleteRecords", () -> admin.deleteRecords(Map.of(p0, RecordsToDelete.beforeOffset(0)))
                    .lowWatermarks().get(p0).get().lowWatermark());
            report("deleteShareGroupOffsets", () -> admin.deleteShareGroupOffsets(name + "-share-gone", Set.of(name))
                    .all().get());
            report("deleteShareGroups", () -> admin.deleteShareGroups(List.of(name + "-share-gone")).all().get());
            report("deleteStreamsGroupOffsets", () -> admin.deleteStreamsGroupOffsets(name + "-streams", Set.of(p0))
                    .all().get());
            report("deleteStreamsGroups", () -> admin.deleteStreamsGroups(List.of(name + "-streams")).all().get());
            report("deleteTopics", () -> admin.deleteTopics(List.of(name + "-new")).all().get());
            Settled.until(() -> !admin.listTopics().names().get().contains(name + "-new"));
            report("describeAcls", () -> admin.describeAcls(acls).values().get().size());
            report("describeClassicGroups", () -> admin.describeClassicGroups(List.of(name)).all().get().values()
                    .stream().map(g -> g.state() + " members " + g.members().size()).toList());
            // the quotas of this run's client id: a broker keeps those of every earlier run
            report("describeClientQuotas", () -> admin.describeClientQuotas(ClientQuotaFilter.containsOnly(List.of(
                    ClientQuotaFilterComponent.ofEntity(ClientQuotaEntity.CLIENT_ID, name)))).entities().get());
            report("describeCluster", () -> admin.describeCluster().nodes().get().size() + " nodes");
            report("describeConfigs", () -> admin.describeConfigs(List.of(topicConfigs)).all().get()
                    .get(topicConfigs).get("cleanup.policy").value());
            report("describeConsumerGroups", () -> admin.describeConsumerGroups(List.of(name)).all().get().values()
                    .stream().map(g -> g.groupState() + " " + g.type() + " members " + g.members().size()).toList());
            report("describeDelegationToken", () -> admin.describeDelegationToken().delegationTokens().get().size());
            report("describeFeatures", () -> new TreeMap<>(admin.describeFeatures().featureMetadata().get()
                    .finalizedFeatures()).keySet());
            report("describeLogDirs", () -> admin.describeLogDirs(List.of(node)).allDescriptions().get()
                    .get(node).size() + " dirs");
            report("describeMetadataQuorum", () -> admin.describeMetadataQuorum().quorumInfo().get().voters().size()
                    + " voters");
            // the coordinator epoch differs on purpose (docs/kafka-differences.md), the timestamp by nature
            report("describeProducers", () -> admin.describeProducers(List.of(markers)).partitionResult(markers).get()
                    .activeProducers().stream().map(s -> "producer " + s.producerId() + " epoch " + s.producerEpoch()
                            + " last sequence " + s.lastSequence() + " in a transaction "
                            + s.currentTransactionStartOffset().isPresent()).toList());
            report("describeReplicaLogDirs", () -> admin.describeReplicaLogDirs(
                    List.of(new TopicPartitionReplica(name, 0, node))).all().get().size() + " replicas");
            report("describeShareGroups", () -> admin.describeShareGroups(List.of(name + "-share")).all().get()
                    .values().stream().map(g -> g.groupState() + " members " + g.members().size()).toList());
            report("describeStreamsGroups", () -> admin.describeStreamsGroups(List.of(name + "-streams")).all().get()
                    .values().stream().map(g -> g.groupState() + " members " + g.members().size()).toList());
            report("describeTopics", () -> admin.describeTopics(List.of(name)).allTopicNames().get().get(name)
                    .partitions().size() + " partitions");
            report("describeTransactions", () -> admin.describeTransactions(List.of(name + "-txn")).all().get()
                    .values().stream().map(d -> d.state() + " epoch " + d.producerEpoch() + " timeout "
                            + d.transactionTimeoutMs() + " partitions " + d.topicPartitions()).toList());
            report("describeUserScramCredentials", () -> admin.describeUserScramCredentials(List.of(name)).all().get()
                    .values().stream().map(d -> d.credentialInfos().toString()).toList());
            Set<TopicPartition> elected = Set.of(p0, new TopicPartition(name, 9), new TopicPartition(name + "-missing", 0));
            report("electLeaders", () -> elections(admin.electLeaders(ElectionType.PREFERRED, elected)));
            report("electLeaders, unclean", () -> elections(admin.electLeaders(ElectionType.UNCLEAN, elected)));
            report("electLeaders, all", () -> elections(admin.electLeaders(ElectionType.PREFERRED, null)));
            report("expireDelegationToken", () -> admin.expireDelegationToken(noToken).expiryTimestamp().get() > 0);
            report("fenceProducers", () -> admin.fenceProducers(List.of(name)).all().get());
            report("forceTerminateTransaction", () -> admin.forceTerminateTransaction(name).result().get());
            report("incrementalAlterConfigs", () -> admin.incrementalAlterConfigs(Map.of(topicConfigs, List.of(
                    new AlterConfigOp(new ConfigEntry("retention.ms", "60000"), AlterConfigOp.OpType.SET)))).all().get());
            report("listClientMetricsResources", () -> admin.listClientMetricsResources().all().get());
            report("listConfigResources", () -> admin.listConfigResources(
                    Set.of(ConfigResource.Type.GROUP), new ListConfigResourcesOptions())
                    .all().get().stream().filter(r -> r.name().startsWith(name)).toList());
            report("listConsumerGroupOffsets", () -> admin.listConsumerGroupOffsets(
                    Map.of(name, new ListConsumerGroupOffsetsSpec())).partitionsToOffsetAndMetadata(name).get());
            report("listConsumerGroups", () -> admin.listConsumerGroups().all().get().stream()
                    .filter(g -> g.groupId().startsWith(name)).map(g -> g.groupId()).sorted().toList());
            report("listGroups", () -> admin.listGroups().all().get().stream()
                    .filter(g -> g.groupId().startsWith(name)).map(g -> g.groupId() + " " + g.type()).sorted().toList());
            report("listOffsets", () -> admin.listOffsets(Map.of(p0, OffsetSpec.latest())).partitionResult(p0).get()
                    .offset());
            report("listPartitionReassignments", () -> admin.listPartitionReassignments(
                    Set.of(p0, new TopicPartition(name + "-missing", 0))).reassignments().get());
            report("listPartitionReassignments, all", () -> admin.listPartitionReassignments().reassignments().get());
            report("listShareGroupOffsets", () -> admin.listShareGroupOffsets(
                    Map.of(name + "-share", new ListShareGroupOffsetsSpec())).all().get());
            report("listStreamsGroupOffsets", () -> admin.listStreamsGroupOffsets(
                    Map.of(name + "-streams", new ListStreamsGroupOffsetsSpec())).all().get());
            report("listTopics", () -> admin.listTopics().names().get().stream().filter(t -> t.startsWith(name))
                    .sorted().toList());
            report("listTransactions", () -> admin.listTransactions().all().get().stream()
                    .filter(t -> t.transactionalId().startsWith(name))
                    .map(t -> t.transactionalId() + " " + t.state()).sorted().toList());
            report("metrics", () -> admin.metrics().isEmpty() ? "none" : "some");
            report("registerMetricForSubscription", () -> {
                admin.registerMetricForSubscription(metric);
                return null;
            });
            report("removeMembersFromConsumerGroup", () -> admin.removeMembersFromConsumerGroup(
                    name, new RemoveMembersFromConsumerGroupOptions()).all().get());
            report("removeRaftVoter", () -> admin.removeRaftVoter(9, Uuid.randomUuid()).all().get());
            report("renewDelegationToken", () -> admin.renewDelegationToken(noToken).expiryTimestamp().get() > 0);
            report("unregisterBroker", () -> admin.unregisterBroker(9).all().get());
            report("unregisterController", () -> admin.unregisterController(9).all().get());
            report("unregisterMetricFromSubscription", () -> {
                admin.unregisterMetricFromSubscription(metric);
                return null;
            });
            report("updateFeatures", () -> admin.updateFeatures(Map.of("group.version",
                    new FeatureUpdate((short) 1, FeatureUpdate.UpgradeType.UPGRADE))).all().get());
        }
        Arrays.stream(Admin.class.getMethods())
                .filter(m -> Modifier.isAbstract(m.getModifiers()) && !m.getName().equals("close"))
                .map(Method::getName).filter(m -> !REPORTED.contains(m)).sorted().distinct()
                .forEach(m -> System.out.println(m + ": not called"));
    }

    interface Call {
        Object run() throws Exception;
    }

    private static void report(String method, Call call) {
        String result;
        try {
            result = "ok " + summary(call.run());
        } catch (ExecutionException e) {
            result = e.getCause().getClass().getName() + ": " + e.getCause().getMessage();
        } catch (Exception e) {
            result = e.getClass().getName() + ": " + e.getMessage();
        }
        REPORTED.add(method);
        System.out.println(method + ": " + result.strip());
    }

    /** Each partition's election: "elected", or its error's class and message. */
    private static Map<TopicPartition, String> elections(ElectLeadersResult result) throws Exception {
        return result.partitions().get().entrySet().stream().collect(Collectors.toMap(Map.Entry::getKey,
                e -> e.getValue().map(t -> t.getClass().getSimpleName() + ": " + t.getMessage()).orElse("elected")));
    }

    /** A value as one line, maps sorted by key so that both sides print in one order. */
    private static String summary(Object value) {
        if (value == null) {
            return "";
        }
        if (value instanceof Map<?, ?> map) {
            return new TreeMap<>(map.entrySet().stream().collect(Collectors.toMap(
                    e -> String.valueOf(e.getKey()), e -> summary(e.getValue())))).toString();
        }
        if (value instanceof Collection<?> items) {
            return items.stream().map(AdminMethods::summary).toList().toString();
        }
        return value.toString();
    }
}
