// tests/util/net_test.cpp — util::resolve_tcp, the one getaddrinfo wrapper of the project: numeric
// hosts resolve without DNS, a passive empty host is every interface, and a failure names the host.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <string>

#include <gtest/gtest.h>

#include "util/net.hpp"

namespace {

const sockaddr_in& ipv4_of(const addrinfo& a) {
  EXPECT_EQ(a.ai_family, AF_INET);
  return *reinterpret_cast<const sockaddr_in*>(a.ai_addr);
}

}  // namespace

TEST(net, resolve_tcp_gives_the_address_and_port_of_a_numeric_host) {
  std::string why;
  const auto res = dd::util::resolve_tcp("127.0.0.1", 4242, AF_INET, /*passive=*/false, why);
  ASSERT_TRUE(res) << why;
  EXPECT_EQ(res->ai_socktype, SOCK_STREAM);
  EXPECT_EQ(ntohl(ipv4_of(*res).sin_addr.s_addr), INADDR_LOOPBACK);
  EXPECT_EQ(ntohs(ipv4_of(*res).sin_port), 4242);
  EXPECT_EQ(why, "");
}

TEST(net, resolve_tcp_passive_with_an_empty_host_is_every_interface) {
  std::string why;
  const auto res = dd::util::resolve_tcp("", 80, AF_INET, /*passive=*/true, why);
  ASSERT_TRUE(res) << why;
  EXPECT_EQ(ntohl(ipv4_of(*res).sin_addr.s_addr), INADDR_ANY);
  EXPECT_EQ(ntohs(ipv4_of(*res).sin_port), 80);
}

TEST(net, resolve_tcp_failure_names_the_host_and_the_reason) {
  std::string why;
  // An IPv6 literal asked for as IPv4: refused by getaddrinfo without asking DNS.
  const auto res = dd::util::resolve_tcp("::1", 80, AF_INET, /*passive=*/false, why);
  EXPECT_FALSE(res);
  EXPECT_EQ(why.rfind("cannot resolve '::1': ", 0), 0u) << why;
  EXPECT_GT(why.size(), std::string("cannot resolve '::1': ").size()) << why;
}
