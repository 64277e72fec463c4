// doctor's two outputs: the line people read and the JSON scripts parse.
#include "doctor/report.h"

#include <gtest/gtest.h>

namespace tcp2rdma::tools::doctor {
namespace {

TEST(DoctorReport, LinesAlignTheVerdictAndShowTheFixOnlyForFailures) {
  EXPECT_EQ(format_line(passed("devices", "rxe0 (1 port)")), "ok    devices: rxe0 (1 port)");
  EXPECT_EQ(format_line(warned("memlock", "about 28 connections fit")), "warn  memlock: about 28 connections fit");
  EXPECT_EQ(format_line(failed("devices", "no RDMA device", "modprobe rdma_rxe")),
            "FAIL  devices: no RDMA device -- fix: modprobe rdma_rxe");
  Check warning_with_advice = warned("rules", "none selects RDMA");
  warning_with_advice.fix = "not shown";
  EXPECT_EQ(format_line(warning_with_advice), "warn  rules: none selects RDMA");
}

TEST(DoctorReport, JsonCarriesEveryCheckAndTheOverallVerdict) {
  std::vector<Check> checks = {passed("devices", "rxe0 (1 port)"), warned("memlock", "about 28"),
                               failed("rdma_cm", "cannot open", "modprobe rdma_ucm")};
  EXPECT_EQ(format_json(checks),
            "{\"checks\":[{\"name\":\"devices\",\"status\":\"ok\",\"finding\":\"rxe0 (1 port)\",\"fix\":null},"
            "{\"name\":\"memlock\",\"status\":\"warn\",\"finding\":\"about 28\",\"fix\":null},"
            "{\"name\":\"rdma_cm\",\"status\":\"fail\",\"finding\":\"cannot open\",\"fix\":\"modprobe rdma_ucm\"}],"
            "\"ok\":false}");
  checks.pop_back();
  EXPECT_NE(format_json(checks).find("],\"ok\":true}"), std::string::npos);  // a warning alone passes
}

TEST(DoctorReport, JsonEscapesWhatFindingsQuote) {
  // dlerror() and rule diagnostics quote file names and contents: quotes, backslashes, control bytes.
  std::string json = format_json({failed("module", "cannot load \"a\\b\"\n\x01", "x")});
  EXPECT_NE(json.find("\"finding\":\"cannot load \\\"a\\\\b\\\"\\n\\u0001\""), std::string::npos) << json;
}

TEST(DoctorReport, OnlyAFailureFailsTheMachine) {
  EXPECT_TRUE(none_failed({}));
  EXPECT_TRUE(none_failed({passed("a", ""), warned("b", "")}));
  EXPECT_FALSE(none_failed({passed("a", ""), failed("b", "", "")}));
}

TEST(DoctorReport, SizesReadAsPeopleWriteThem) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(64 * 1024), "64 KiB");
  EXPECT_EQ(format_bytes(102400), "100 KiB");
  EXPECT_EQ(format_bytes(8 * 1024 * 1024), "8 MiB");
  EXPECT_EQ(format_bytes(7 * 1024 * 1024 + 512 * 1024), "7.5 MiB");
  EXPECT_EQ(format_bytes(uint64_t{3} << 30), "3 GiB");
}

}  // namespace
}  // namespace tcp2rdma::tools::doctor
