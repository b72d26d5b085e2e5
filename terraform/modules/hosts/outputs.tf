output "hosts" {
  description = "Each host: role, private and public address."
  value = {
    for name, i in aws_instance.host : name => {
      role       = i.tags["role"]
      private_ip = i.private_ip
      public_ip  = i.public_ip
    }
  }
}
