"""Real servers for the tests: a redis-server the suite starts itself, a local Redis Cluster for the
modules that run on both (`REDIS_BACKENDS = ("single", "cluster")`), and gateways on free ports."""

from __future__ import annotations

import ast
import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis as redis_sync

from gateway.bench.kafka_broker import java17_home
from gateway.client import Client
from gateway.config import Config
from gateway.server.gateway import Gateway
from gateway.store import Store
from gateway.store.connection import CLUSTER_SCHEMES, RedisClient, connect, is_cluster_url
from gateway.store.embedded import EmbeddedCluster, EmbeddedRedis, free_port

SPAWNED: set[str] = set()
"""Every program the suite has started so far, as given to `subprocess.Popen` (its `argv[0]` where no
executable is named): tests/test_debian_packages.py checks each against debian-packages.txt."""


def _record_spawn(event: str, args: tuple[Any, ...]) -> None:
    if event == "subprocess.Popen":
        executable, argv = args[0], args[1]
        program = executable or (argv if isinstance(argv, (str, bytes, os.PathLike)) else argv[0])
        SPAWNED.add(os.fsdecode(program))


sys.addaudithook(_record_spawn)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The check of the programs the suite started runs last, when they have all been started."""
    last = [i for i in items if i.nodeid.startswith("tests/test_debian_packages.py::")]
    items[:] = [i for i in items if i not in last] + last


def _docker_engine() -> bool:
    try:
        import docker

        docker.from_env(timeout=2).ping()
        return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def redis_server() -> Iterator[str]:
    """One Redis for the run: a container when a Docker engine answers, else the local binary."""
    if _docker_engine():
        from testcontainers.redis import RedisContainer

        with RedisContainer("redis:7") as container:
            host = container.get_container_host_ip()
            port = container.get_exposed_port(6379)
            yield f"redis://{host}:{port}/0"
        return
    with _started(EmbeddedRedis, "gw-test-redis-") as url:
        yield url


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[str]:
    """A local Redis Cluster of three primaries for the run, started the first time a test needs it."""
    with _started(EmbeddedCluster, "gw-test-cluster-") as url:
        yield url


@contextlib.contextmanager
def _started(kind: type[EmbeddedRedis] | type[EmbeddedCluster], prefix: str) -> Iterator[str]:
    """A local server of `kind` in a temporary directory, for as long as the block runs."""
    with tempfile.TemporaryDirectory(prefix=prefix) as d:
        server = kind(Path(d))
        server.start()
        try:
            yield server.url
        finally:
            server.stop()


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One real Apache Kafka 4.4 node (tests/kafka_jvm.py's KafkaBroker) for the run, started the first time
    a test asks for it, stopped at the end; its log stays in its temporary directory."""
    from tests.kafka_jvm import KafkaBroker

    with KafkaBroker(tmp_path_factory.mktemp("kafka-broker")) as broker:
        yield broker


@pytest.fixture(scope="session")
def sasl_kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One SASL Kafka 4.4 node (tests/kafka_jvm.py's SaslKafkaBroker) for the run's tests that log in,
    started the first time one asks for it: each deletes every ACL before it starts (tests/sasl_pair.py,
    the ACL scenarios' `clean`) and names its topics and groups uniquely."""
    from tests.kafka_jvm import SaslKafkaBroker

    with SaslKafkaBroker(tmp_path_factory.mktemp("kafka-sasl-broker")) as broker:
        yield broker


@pytest.fixture(scope="session")
def token_kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The same SASL node with delegation tokens on, its secret tests/test_delegation_tokens.py's
    SECRET: one for the run's token tests, apart from sasl_kafka_broker, where tokens are off as on
    a default Kafka."""
    from tests.kafka_jvm import SaslKafkaBroker
    from tests.test_delegation_tokens import SECRET

    broker = SaslKafkaBroker(tmp_path_factory.mktemp("kafka-token-broker"))
    broker.settings["delegation.token.secret.key"] = SECRET
    with broker:
        yield broker


@pytest.fixture(params=["gateway", "kafka"])
def either(request: pytest.FixtureRequest) -> str:
    """The bootstrap servers of a test gateway, then of Kafka 4.4: one scenario on both, so that a
    failure says whose it is."""
    if request.param == "kafka":
        return str(request.getfixturevalue("kafka_broker").bootstrap)
    return kafka_bootstrap(request.getfixturevalue("gateway"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test that used the Kafka broker shows the end of the broker's log."""
    outcome = yield
    report = outcome.get_result()
    funcargs = getattr(item, "funcargs", {})
    broker = next((funcargs[name] for name in ("kafka_broker", "sasl_kafka_broker", "token_kafka_broker")
                   if name in funcargs), None)
    if report.failed and broker is not None:
        report.sections.append(("Kafka broker log (end)", f"{broker.log}\n{broker.log_tail()}"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--redis-backends", default="",
                     help="run every test on these backends (comma-separated: single, cluster) instead of "
                          "each module's REDIS_BACKENDS")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A module with `REDIS_BACKENDS = ("single", "cluster")` runs each of its tests on both."""
    forced = metafunc.config.getoption("--redis-backends")
    backends = forced.split(",") if forced else getattr(metafunc.module, "REDIS_BACKENDS", None)
    if backends and "redis_url" in metafunc.fixturenames:
        metafunc.parametrize("redis_url", backends, indirect=True)


def flush(url: str, *, data: bool = True) -> None:
    """Empty a Redis or every primary of a cluster: data (unless `data` is False) and scripts."""
    if is_cluster_url(url):
        scheme, _, rest = url.partition("://")
        r: redis_sync.Redis | redis_sync.RedisCluster = redis_sync.RedisCluster.from_url(
            f"{CLUSTER_SCHEMES[scheme]}://{rest}")
    else:
        r = redis_sync.Redis.from_url(url)
    if data:
        r.flushall()
    r.script_flush()
    r.close()


@pytest.fixture
def redis_url(request: pytest.FixtureRequest) -> str:
    """The shared Redis (or with the "cluster" parameter the shared cluster), emptied before each test."""
    backend = getattr(request, "param", "single")
    url = request.getfixturevalue("redis_cluster" if backend == "cluster" else "redis_server")
    flush(url)
    return str(url)


def test_config(redis_url: str, **overrides: object) -> Config:
    cfg = Config(
        host="127.0.0.1",
        kafka_port=0,
        native_port=0,
        admin_port=0,
        schema_registry_port=0,  # off: a test of the registry picks a free port
        redis_url=redis_url,
        retention_check_interval=3600,
        # Kafka's 3 s wait before a new group's first rebalance would add 3 s to every test forming a
        # classic group; tests of that wait set it themselves
        group_initial_rebalance_delay_ms=0,
    )
    for k, v in overrides.items():
        setattr(cfg, k, v)
    return cfg


test_config.__test__ = False  # type: ignore[attr-defined]


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[Store]:
    """The store layer alone over the test Redis, for tests below the services."""
    s = Store.open(redis_url)
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
async def raw_redis(redis_url: str) -> AsyncIterator[RedisClient]:
    """A client of the test's own on the test Redis, to look at keys under the store, whose own
    client is private to it."""
    r = connect(redis_url)
    try:
        yield r
    finally:
        await r.aclose()


@contextlib.asynccontextmanager
async def running_gateway(cfg: Config) -> AsyncIterator[Gateway]:
    """A whole gateway in this process on `cfg`, stopped on the way out."""
    gw = Gateway(cfg)
    await gw.start()
    try:
        yield gw
    finally:
        await gw.stop()


@pytest.fixture
async def gateway(redis_url: str) -> AsyncIterator[Gateway]:
    """A whole gateway in this process, on free ports, over the test Redis."""
    async with running_gateway(test_config(redis_url)) as gw:
        yield gw


def native_url(gw: Gateway) -> str:
    return f"gateway://127.0.0.1:{gw.listeners['native'].port}"


@pytest.fixture
async def client(gateway: Gateway) -> AsyncIterator[Client]:
    """A native client of the in-process gateway."""
    c = await Client.connect(native_url(gateway))
    yield c
    await c.close()


def kafka_bootstrap(gw: Gateway) -> str:
    return f"127.0.0.1:{gw.listeners['kafka'].port}"


def admin_url(gw: Gateway) -> str:
    return f"http://127.0.0.1:{gw.listeners['admin'].port}"


@dataclass
class GatewayProcess:
    """`gateway serve` as a user runs it, in its own process, so it can be killed with SIGKILL."""

    data_dir: Path
    redis_url: str = ""
    kafka_port: int = field(default_factory=free_port)
    native_port: int = field(default_factory=free_port)
    admin_port: int = field(default_factory=free_port)
    schema_registry_port: int = 0  # off unless a test asks: one fixed default port would collide
    proc: subprocess.Popen[str] | None = None
    banner: str = ""
    args: list[str] = field(default_factory=list)  # more `gateway serve` flags
    command: list[str] = field(default_factory=lambda: [sys.executable, "-m", "gateway"])  # the `gateway` to run
    # its environment: this one, less the GATEWAY_* settings, so the flags alone decide
    env: dict[str, str] = field(default_factory=lambda: {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")})
    cwd: Path | None = None

    @property
    def native_url(self) -> str:
        return f"gateway://127.0.0.1:{self.native_port}"

    @property
    def kafka_bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    @property
    def node_id(self) -> int:
        return int(self.banner.rsplit("node id ", 1)[1])

    def start(self, timeout: float = 30.0) -> None:
        """Start `gateway serve`; on a first start, ports another process took between choosing
        them and binding them are chosen again (a later start keeps its ports: clients know them)."""
        for attempt in range(3):
            try:
                self._start()
                return
            except RuntimeError as exc:
                if self.banner or attempt == 2 or not re.search(r"port \d+ is in use", str(exc)):
                    raise
                self.kafka_port, self.native_port, self.admin_port = free_port(), free_port(), free_port()

    def _start(self) -> None:
        args = [
            *self.command, "serve",
            "--kafka-port", str(self.kafka_port),
            "--native-port", str(self.native_port),
            "--admin-port", str(self.admin_port),
            "--schema-registry-port", str(self.schema_registry_port),
            "--data-dir", str(self.data_dir),
        ]
        if self.redis_url:
            args += ["--redis-url", self.redis_url]
        args += self.args
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=self.env,
                                     cwd=self.cwd)
        assert self.proc.stdout is not None
        lines = []
        for line in self.proc.stdout:
            lines.append(line)
            if re.search(r"gateway listening on", line):
                self.banner = line
                return
        raise RuntimeError("gateway did not start:\n" + "".join(lines))

    def output_until(self, text: str) -> None:
        """Read the gateway's output until a line holds `text` (a debug stop point's warning)."""
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            if text in line:
                return
        raise AssertionError(f"the gateway ended before it printed {text!r}")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(30)


@pytest.fixture
def gateway_process(tmp_path: Path) -> Iterator[GatewayProcess]:
    """A gateway process with an embedded Redis in a fresh data dir; killed at the end if still up."""
    gp = GatewayProcess(tmp_path / "data")
    try:
        yield gp
    finally:
        if gp.proc is not None and gp.proc.poll() is None:
            gp.proc.kill()
            gp.proc.wait(10)
        with contextlib.suppress(Exception):
            EmbeddedRedis(gp.data_dir).stop_leftover()


T = TypeVar("T")

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def example_command(script: str) -> list[str]:
    """The command an example's header tells its reader to run, split into words."""
    doc = ast.get_docstring(ast.parse((EXAMPLES / script).read_text())) or ""
    commands = [line.strip() for line in doc.splitlines() if line.strip().startswith(f"python examples/{script} ")]
    assert len(commands) == 1, f"examples/{script} should show one command in its header"
    return shlex.split(commands[0])


async def run_example(script: str, gw: Gateway, timeout: float = 90.0) -> tuple[int, str]:
    """Run the command in an example's header as a user would, in its own process, against `gw`:
    the default addresses it names (Kafka's 127.0.0.1:9092, the native gateway://127.0.0.1:6650) are
    replaced by `gw`'s, and nothing else, so what a test runs is what the example tells its reader.
    Returns (exit code, everything it printed)."""
    addresses = {"127.0.0.1:9092": kafka_bootstrap(gw), "gateway://127.0.0.1:6650": native_url(gw)}
    python, path, *args = example_command(script)
    assert (python, path) == ("python", f"examples/{script}")
    return await run_program(sys.executable, str(EXAMPLES / script), *(addresses.get(a, a) for a in args),
                             timeout=timeout)


async def run_program(*argv: str, timeout: float, stdin: bytes | None = None, stderr: Any = None,
                      **options: Any) -> tuple[int, str]:
    """Run a program to its end, awaited (a gateway under test may share this event loop), killed
    at `timeout`; `options` go to the subprocess (cwd, env). Its output goes to a file, so a child
    it leaves running in the background holds nothing up. Returns (exit code, everything it printed,
    its standard error too unless `stderr`, a file, takes that apart)."""
    import asyncio

    with tempfile.TemporaryFile() as out:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=out, stderr=asyncio.subprocess.STDOUT if stderr is None else stderr, **options,
        )
        try:
            await asyncio.wait_for(proc.communicate(stdin), timeout)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        assert proc.returncode is not None
        out.seek(0)
        return proc.returncode, out.read().decode()


def spark_env() -> dict[str, str]:
    """What a Spark driver and its Python workers need: Java 17, this interpreter, this checkout, and
    loopback as its address (Spark otherwise looks up the machine's own name, which a container or a
    new root need not resolve, and fails before it starts)."""
    root = str(Path(__file__).resolve().parents[1])
    path = os.environ.get("PYTHONPATH", "")
    return {
        "JAVA_HOME": java17_home(),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PYTHONPATH": root + (os.pathsep + path if path else ""),
    }


def spark_kafka_jars() -> str:
    """Spark's own Kafka connector and the jars it needs beyond PySpark's, as tests/spark_kafka lists
    them (`./dev test` resolves them), for `spark.jars`."""
    listed = Path(__file__).resolve().parent / "spark_kafka" / "target" / "classpath.txt"
    if not listed.is_file():
        raise RuntimeError("tests/spark_kafka is not built: `./dev test` builds it (it needs Maven and a Java 17 JDK)")
    return listed.read_text().strip().replace(os.pathsep, ",")


@pytest.fixture(scope="session")
def spark():
    """One local Spark (two cores) for every Spark test of the run: starting its JVM is the big cost.
    Spark's `kafka` source and sink are on its classpath beside the gateway's own data source."""
    os.environ.update(spark_env())
    from pyspark.sql import SparkSession

    from gateway.spark import register

    session = (
        SparkSession.builder.master("local[2,2]")  # two threads; a failed task is tried again once
        .appName("gateway-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.jars", spark_kafka_jars())
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


async def eventually(
    check: Callable[[], object | Awaitable[object]], timeout: float = 10.0, what: str = "condition"
) -> object:
    """Poll `check` (sync or async) until it returns something true, which is returned; fail at the
    deadline, naming `what` was awaited. For conditions no event announces."""
    import asyncio
    import inspect

    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result
        assert asyncio.get_running_loop().time() < deadline, f"{what} not reached within {timeout}s"
        await asyncio.sleep(0.02)


async def in_spark(spark: Any, work: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run blocking Spark calls in a thread, so the gateway sharing this event loop keeps serving.
    The session is made active in that thread's JVM twin: Spark finds Python data sources through
    it when starting a streaming write."""

    def run() -> T:
        spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
        return work(*args, **kwargs)

    import asyncio

    return await asyncio.to_thread(run)
