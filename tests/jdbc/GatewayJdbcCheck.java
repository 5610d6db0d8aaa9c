// What a BI tool does through the official ClickHouse JDBC driver, step by step, against the
// gpubill gateway (tests/e2e/test_jdbc_gateway.py runs it and reads its output).
//
//   java -cp <driver jars> GatewayJdbcCheck.java <jdbc url> <user> <password> <queries file> [v1]
//
// The queries file holds SQL statements separated by lines of `-- next`. Every step prints one
// line, `STEP <name> OK <what it saw>` or `STEP <name> FAIL <why>`, and a failed step does not
// stop the others; the last line is `DONE <ok>/<steps>`. With `v1` the driver runs in its
// version-1 compatibility mode (the system property clickhouse.jdbc.v1=true, through the
// driver's ClickHouseDriver).

import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.Driver;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;

public class GatewayJdbcCheck {
    interface Step {
        String run() throws Exception;
    }

    static int steps = 0;
    static int ok = 0;

    static void step(String name, Step body) {
        steps++;
        try {
            String seen = body.run();
            ok++;
            System.out.println("STEP " + name + " OK " + oneLine(seen));
        } catch (Throwable e) {
            Throwable cause = e;
            StringBuilder why = new StringBuilder(e.getClass().getSimpleName() + ": " + e.getMessage());
            while (cause.getCause() != null && cause.getCause() != cause) {
                cause = cause.getCause();
                why.append(" <- ").append(cause.getClass().getSimpleName()).append(": ").append(cause.getMessage());
            }
            System.out.println("STEP " + name + " FAIL " + oneLine(why.toString()));
        }
        System.out.flush();
    }

    static String oneLine(String text) {
        String line = String.valueOf(text).replaceAll("\\s+", " ");
        return line.length() > 400 ? line.substring(0, 400) : line;
    }

    /** Every row of a result set, read with getObject (as a BI tool shows it): "n rows, first [..]". */
    static String rows(ResultSet rs) throws SQLException {
        ResultSetMetaData meta = rs.getMetaData();
        int n = 0;
        StringBuilder first = new StringBuilder();
        while (rs.next()) {
            if (n == 0) {
                for (int i = 1; i <= meta.getColumnCount(); i++) {
                    first.append(i > 1 ? "|" : "").append(meta.getColumnLabel(i)).append('=').append(rs.getObject(i));
                }
            }
            n++;
        }
        rs.close();
        return n + " rows, columns " + meta.getColumnCount() + ", first " + first;
    }

    static String column(ResultSet rs, String name, int limit) throws SQLException {
        List<String> seen = new ArrayList<>();
        int n = 0;
        while (rs.next()) {
            if (n++ < limit) {
                seen.add(rs.getString(name));
            }
        }
        rs.close();
        return n + " rows: " + String.join(",", seen);
    }

    public static void main(String[] args) throws Exception {
        String url = args[0];
        Properties props = new Properties();
        props.setProperty("user", args[1]);
        props.setProperty("password", args[2]);
        String[] queries = Files.readString(Path.of(args[3])).split("\n-- next\n");
        boolean v1 = args.length > 4 && args[4].equals("v1");
        if (v1) {  // the system property the driver's proxy (ClickHouseDriver) reads; not a connection property
            System.setProperty("clickhouse.jdbc.v1", "true");
        }
        Connection[] holder = new Connection[1];
        step("connect", () -> {
            holder[0] = v1 ? ((Driver) Class.forName("com.clickhouse.jdbc.ClickHouseDriver").getDeclaredConstructor()
                    .newInstance()).connect(url, props) : DriverManager.getConnection(url, props);
            return holder[0].getClass().getName() + " catalog=" + holder[0].getCatalog() + " schema=" + holder[0].getSchema();
        });
        Connection conn = holder[0];
        if (conn == null) {
            System.out.println("DONE " + ok + "/" + steps);
            System.exit(1);
        }
        DatabaseMetaData[] meta = new DatabaseMetaData[1];
        step("metadata", () -> {
            meta[0] = conn.getMetaData();
            return meta[0].getDatabaseProductName() + " " + meta[0].getDatabaseProductVersion() + " driver "
                    + meta[0].getDriverVersion() + " user " + meta[0].getUserName();
        });
        step("getCatalogs", () -> column(meta[0].getCatalogs(), "TABLE_CAT", 5));
        step("getSchemas", () -> column(meta[0].getSchemas(), "TABLE_SCHEM", 5));
        step("getTableTypes", () -> column(meta[0].getTableTypes(), "TABLE_TYPE", 10));
        step("getTables", () -> column(meta[0].getTables(null, null, "%", null), "TABLE_NAME", 200));
        step("getTables views", () -> column(meta[0].getTables(null, null, "v\\_%", new String[] {"VIEW"}), "TABLE_NAME", 50));
        step("getColumns v_invoices", () -> column(meta[0].getColumns(null, null, "v_invoices", "%"), "COLUMN_NAME", 50));
        step("getColumns all", () -> column(meta[0].getColumns(null, null, "%", "%"), "COLUMN_NAME", 3));
        step("getTypeInfo", () -> column(meta[0].getTypeInfo(), "TYPE_NAME", 5));
        step("getPrimaryKeys", () -> column(meta[0].getPrimaryKeys(null, null, "invoices"), "COLUMN_NAME", 5));
        step("getFunctions", () -> column(meta[0].getFunctions(null, null, "sum%"), "FUNCTION_NAME", 5));
        step("select 1", () -> {
            try (Statement st = conn.createStatement()) {
                return rows(st.executeQuery("SELECT 1 AS one, 'x' AS s, toDecimal64(1.25, 2) AS d, now() AS t"));
            }
        });
        step("prepared", () -> {
            try (PreparedStatement ps = conn.prepareStatement(
                    "SELECT count() AS n, sum(total) AS total FROM v_invoices WHERE period >= ? AND status = ? AND revision >= ?")) {
                ps.setString(1, "2026-01");
                ps.setString(2, "issued");
                ps.setInt(3, 1);
                return rows(ps.executeQuery());
            }
        });
        step("prepared metadata", () -> {
            try (PreparedStatement ps = conn.prepareStatement("SELECT number, period FROM v_invoices WHERE tenant = ?")) {
                ResultSetMetaData md = ps.getMetaData();
                return md == null ? "no metadata before execution" : md.getColumnCount() + " columns";
            }
        });
        step("prepared reused", () -> {
            StringBuilder seen = new StringBuilder();
            try (PreparedStatement ps = conn.prepareStatement("SELECT number, total FROM v_invoices WHERE tenant = ? ORDER BY number")) {
                for (String tenant : new String[] {"acme", "beta", "nobody's"}) {
                    ps.setString(1, tenant);
                    seen.append(tenant).append(": ").append(rows(ps.executeQuery())).append("; ");
                }
            }
            return seen.toString();
        });
        step("limited", () -> {
            try (Statement st = conn.createStatement()) {
                st.setMaxRows(2);
                st.setQueryTimeout(30);
                return rows(st.executeQuery("SELECT number, tenant FROM v_invoices ORDER BY number"));
            }
        });
        for (int i = 0; i < queries.length; i++) {
            String sql = queries[i].strip();
            step("finance query " + (i + 1), () -> {
                try (Statement st = conn.createStatement()) {
                    return rows(st.executeQuery(sql));
                }
            });
        }
        step("close", () -> {
            conn.close();
            return "closed";
        });
        System.out.println("DONE " + ok + "/" + steps);
    }
}
