"""The rules file: validated (exit 2, one line naming the field), and emitted as Prometheus alerting rules."""


import yaml


def test_shipped_rules_load_and_emit_prometheus_rules(run_json):
    out = run_json("control", "rules", "--prometheus")
    assert out["rules"]["hang"]["factor"] == 20 and out["rules"]["node_risk"]["threshold"] == 0.5
    groups = yaml.safe_load(out["prometheus"])["groups"]
    hang = next(r for r in groups[0]["rules"] if r["alert"] == "WankaJobHang")
    assert "20.0 * wanka_control_job_median_step_seconds" in hang["expr"]


def test_a_custom_rules_file_changes_the_alert_thresholds(run_json, tmp_path):
    path = tmp_path / "rules.yaml"
    path.write_text("node_risk: {threshold: 0.8}\nhang: {factor: 5, min_s: 30}\n")
    out = run_json("control", "rules", "--rules", str(path), "--prometheus")
    exprs = {r["alert"]: r["expr"] for r in yaml.safe_load(out["prometheus"])["groups"][0]["rules"]}
    assert exprs["WankaNodeRisk"] == "wanka_control_node_risk > 0.8"
    assert "5.0 * wanka_control_job_median_step_seconds" in exprs["WankaJobHang"] and "> 30.0" in exprs["WankaJobHang"]


def test_bad_rules_files_name_the_field(run_cli, tmp_path):
    cases = {"hang: {factor: 0.5}\n": "hang.factor", "hang: {facter: 5}\n": "hang.facter",
             "loss_spike: {lr_factor: 2}\n": "loss_spike.lr_factor", "- a\n": "rules", "dead_rank: {action: pray}\n":
             "dead_rank.action", "a: [\n": "rules", "straggler: {action: pray}\n": "straggler.action",
             "straggler: {min_event: 3}\n": "straggler.min_event", "throughput: {below_pct: 150}\n": "throughput.below_pct",
             "throughput: {action: restart}\n": "throughput.action", "node_risk: {score_every_s: 0}\n":
             "node_risk.score_every_s"}
    for i, (text, field) in enumerate(cases.items()):
        path = tmp_path / f"r{i}.yaml"
        path.write_text(text)
        code, out, err = run_cli("control", "rules", "--rules", str(path))
        assert code == 2 and out == "", (text, err)
        assert len(err.strip().splitlines()) == 1 and f"{field}: expected" in err, (text, err)
    code, _, err = run_cli("control", "rules", "--rules", str(tmp_path / "missing.yaml"))
    assert code == 2 and "rules: expected a readable YAML file" in err


def test_the_performance_rules_become_prometheus_alerts_with_their_thresholds(run_json, tmp_path):
    path = tmp_path / "rules.yaml"
    path.write_text("straggler: {min_events: 4, action: restart}\nthroughput: {below_pct: 30}\n")
    out = run_json("control", "rules", "--rules", str(path), "--prometheus")
    alerts = {r["alert"]: r for r in yaml.safe_load(out["prometheus"])["groups"][0]["rules"]}
    assert alerts["WankaStraggler"]["expr"] == "wanka_control_job_straggler_events >= 4"
    assert alerts["WankaStraggler"]["labels"]["action"] == "restart"
    assert alerts["WankaThroughputBelowPlan"]["expr"] == ("wanka_control_job_tokens_per_s < 0.7 * "
                                                          "wanka_control_job_predicted_tokens_per_s")
