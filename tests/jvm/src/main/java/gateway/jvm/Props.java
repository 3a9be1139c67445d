package gateway.jvm;

import java.util.Arrays;
import java.util.Properties;

/** The `key=value` arguments every program here takes after its own: client settings, as a user writes them. */
final class Props {
    private Props() {}

    static Properties of(String bootstrap, String[] args, int from) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        for (String arg : Arrays.copyOfRange(args, from, args.length)) {
            int eq = arg.indexOf('=');
            if (eq < 0) {
                throw new IllegalArgumentException("expected key=value, got " + arg);
            }
            props.put(arg.substring(0, eq), arg.substring(eq + 1));
        }
        return props;
    }
}
