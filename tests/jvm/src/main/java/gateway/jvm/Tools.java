package gateway.jvm;

import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import org.apache.kafka.common.utils.internals.Exit;

/**
 * Tools: runs Kafka's command-line tools, one JVM for many commands. Each line on stdin is a command:
 * a tool's main class and its arguments, separated by tabs. Each runs as its script runs it (its
 * main method); what it prints to stdout and stderr is printed, then `=== exit N`, where N is the
 * code it first exits with (0 when its main returns).
 */
public final class Tools {
    private static final String EXITED = "[the tool exited]";
    private static Integer exitCode;

    /**
     * Thrown where a tool would exit the JVM, so the next command can run. A tool that catches
     * everything (kafka-topics) prints it and exits again: the first code counts, and the line it
     * printed is dropped.
     */
    private static final class Exited extends RuntimeException {
        Exited() {
            super(EXITED, null, false, false);
        }

        @Override
        public String toString() {
            return EXITED;
        }
    }

    private static void exit(int code) {
        if (exitCode == null) {
            exitCode = code;
        }
        throw new Exited();
    }

    public static void main(String[] args) throws Exception {
        Exit.setExitProcedure((code, message) -> exit(code));
        Exit.setHaltProcedure((code, message) -> exit(code));
        PrintStream stdout = System.out;
        PrintStream stderr = System.err;
        BufferedReader commands = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line = commands.readLine(); line != null; line = commands.readLine()) {
            String[] words = line.split("\t");
            ByteArrayOutputStream printed = new ByteArrayOutputStream();
            PrintStream capture = new PrintStream(printed, true, StandardCharsets.UTF_8);
            System.setOut(capture);
            System.setErr(capture);
            exitCode = null;
            try {
                Class.forName(words[0]).getMethod("main", String[].class)
                        .invoke(null, (Object) Arrays.copyOfRange(words, 1, words.length));
            } catch (InvocationTargetException e) {
                if (!(e.getCause() instanceof Exited)) {
                    e.getCause().printStackTrace(capture);
                    exitCode = exitCode == null ? 1 : exitCode;
                }
            } finally {
                System.setOut(stdout);
                System.setErr(stderr);
            }
            for (String out : printed.toString(StandardCharsets.UTF_8).split("\n", -1)) {
                if (!out.equals(EXITED)) {
                    stdout.println(out);
                }
            }
            stdout.println("=== exit " + (exitCode == null ? 0 : exitCode));
            stdout.flush();
        }
    }
}
