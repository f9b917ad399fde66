namespace dtrain { int placeholder_transport = 0; }
