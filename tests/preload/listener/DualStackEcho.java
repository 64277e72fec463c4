// The JVM's half of integration.dual_stack.pair. A JVM opens AF_INET6 sockets and names an
// IPv4 address in its IPv4-mapped form (::ffff:a.b.c.d), for its listeners and its connections alike.
//   server ADDRESS PORT   a ServerSocket bound to ADDRESS, one thread per connection echoing every byte
//                         back until the client's end, then ending its own.
//   client HOST PORT CONNECTIONS BYTES
//                         one Selector over CONNECTIONS non-blocking SocketChannels (NIO, as Netty and
//                         Kafka use it): each writes BYTES of its own pseudo-random sequence, ends its
//                         sending side and reads the echo back to the end; every byte is compared.
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.SocketChannel;
import java.util.Arrays;
import java.util.Random;

public class DualStackEcho {
  public static void main(String[] args) throws Exception {
    if (args.length == 3 && args[0].equals("server")) {
      server(args[1], Integer.parseInt(args[2]));
    } else if (args.length == 5 && args[0].equals("client")) {
      System.exit(client(args[1], Integer.parseInt(args[2]), Integer.parseInt(args[3]), Integer.parseInt(args[4])));
    } else {
      System.err.println("usage: DualStackEcho server ADDRESS PORT | client HOST PORT CONNECTIONS BYTES");
      System.exit(2);
    }
  }

  static void server(String address, int port) throws IOException {
    ServerSocket listener = new ServerSocket();
    listener.setReuseAddress(true);
    listener.bind(new InetSocketAddress(InetAddress.getByName(address), port), 128);
    System.err.println("java server: listening on " + listener.getLocalSocketAddress());
    while (true) {
      Socket s = listener.accept();
      Thread t = new Thread(() -> echo(s));
      t.setDaemon(true);
      t.start();
    }
  }

  static void echo(Socket s) {
    try (s) {
      InputStream in = s.getInputStream();
      OutputStream out = s.getOutputStream();
      byte[] buffer = new byte[65536];
      long total = 0;
      for (int n; (n = in.read(buffer)) > 0; total += n) out.write(buffer, 0, n);
      s.shutdownOutput();
      System.err.println("java server: echoed " + total + " bytes to " + s.getRemoteSocketAddress());
    } catch (IOException e) {
      System.err.println("java server: " + s.getRemoteSocketAddress() + ": " + e);
    }
  }

  static final class Connection {
    final SocketChannel channel;
    final byte[] sent;
    final byte[] received;
    int written = 0;
    int read = 0;
    boolean done = false;

    Connection(SocketChannel channel, int bytes, long seed) {
      this.channel = channel;
      sent = new byte[bytes];
      new Random(seed).nextBytes(sent);
      received = new byte[bytes];
    }
  }

  static int client(String host, int port, int count, int bytes) throws IOException {
    Selector selector = Selector.open();
    InetSocketAddress server = new InetSocketAddress(host, port);
    for (int i = 0; i < count; i++) {
      SocketChannel channel = SocketChannel.open();
      channel.configureBlocking(false);
      Connection c = new Connection(channel, bytes, 1000 + i);
      channel.register(selector, channel.connect(server) ? SelectionKey.OP_READ | SelectionKey.OP_WRITE
                                                         : SelectionKey.OP_CONNECT, c);
    }
    long deadline = System.nanoTime() + 180_000_000_000L;
    int finished = 0;
    ByteBuffer extra = ByteBuffer.allocate(1);
    while (finished < count) {
      if (System.nanoTime() > deadline) {
        System.err.println("java client: timed out with " + finished + " of " + count + " connections done");
        return 1;
      }
      selector.select(1000);
      for (SelectionKey key : selector.selectedKeys()) {
        Connection c = (Connection) key.attachment();
        if (key.isConnectable()) {
          c.channel.finishConnect();
          key.interestOps(SelectionKey.OP_READ | SelectionKey.OP_WRITE);
          continue;
        }
        if (key.isWritable() && c.written < bytes) {
          c.written += c.channel.write(ByteBuffer.wrap(c.sent, c.written, Math.min(262144, bytes - c.written)));
          if (c.written == bytes) {
            c.channel.shutdownOutput();
            key.interestOps(SelectionKey.OP_READ);
          }
        }
        if (key.isReadable()) {
          int n = c.read < bytes ? c.channel.read(ByteBuffer.wrap(c.received, c.read, bytes - c.read))
                                 : c.channel.read(extra.clear());
          if (n > 0 && c.read == bytes) {
            System.err.println("java client: more bytes than were sent on " + c.channel.getLocalAddress());
            return 1;
          }
          if (n > 0) c.read += n;
          if (n < 0) {
            if (c.read != bytes || !Arrays.equals(c.sent, c.received)) {
              System.err.println("java client: echo differs on " + c.channel.getLocalAddress() + " (" + c.read + " of " + bytes + " bytes)");
              return 1;
            }
            System.err.println("java client: " + c.channel.getLocalAddress() + " -> " + c.channel.getRemoteAddress() + ": echo exact");
            c.channel.close();
            finished++;
          }
        }
      }
      selector.selectedKeys().clear();
    }
    System.err.println("java client: " + count + " connections, " + bytes + " bytes each way, every echo exact");
    return 0;
  }
}
